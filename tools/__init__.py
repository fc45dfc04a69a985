"""Tooling run from a source checkout (``python -m tools.…``); in no wheel."""
