"""Benchmarks of klutch-gitops against the real local stack; run them with ``make bench``."""
