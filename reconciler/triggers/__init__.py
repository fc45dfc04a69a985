"""What starts a pass besides the clock: webhooks, Git sources and replay protection."""
