"""Tests with the real GitOps tools next to the reconciler (Flux, Argo CD)."""
