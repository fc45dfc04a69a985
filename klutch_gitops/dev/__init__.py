"""``klutch-gitops dev``: the local stack and demo seeding, loaded only when a dev command runs."""
