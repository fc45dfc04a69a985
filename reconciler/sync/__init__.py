"""One repository's sync pass: desired state from Git, apply to both clusters, observe,
write back."""
