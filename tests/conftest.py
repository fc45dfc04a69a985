"""Tiers follow folders: tests/unit is marked ``unit``, tests/integration ``integration``,
tests/chaos ``chaos``."""

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = Path(item.fspath).parent.name
        if tier in ("unit", "integration", "chaos"):
            item.add_marker(getattr(pytest.mark, tier))
