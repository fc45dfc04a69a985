"""The kind tier: tests that need a Docker daemon and kind, run with ``pytest -m kind tests/kind``
(``make kind-test``). They are left out of every other run, ``make test`` included, rather than
skipped there: a machine without Docker (CI, the dev machines) cannot run them."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kind: needs a Docker daemon and kind (tests/kind; make kind-test)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "kind" in (config.option.markexpr or ""):
        return
    kind_items = [item for item in items if HERE in Path(item.fspath).resolve().parents]
    if kind_items:
        config.hook.pytest_deselected(items=kind_items)
        items[:] = [item for item in items if item not in kind_items]
