"""What runs the product on one machine: the local stack, the local provider, demo seeding."""
