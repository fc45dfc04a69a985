"""Package rules: the two wings (``bind_api`` and ``reconciler``) never import each other, and
no product module or function outgrows what one person reads at once.

What they share (the Klutch consumer protocol, the work queue) lives in ``klutch_gitops``; there,
only the entry points and the dev/local-stack code may import a wing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WINGS = ("bind_api", "reconciler")


def may_import_a_wing(relative: str) -> bool:
    """In the base, the command line (which starts both wings) and ``dev/`` (the local stack,
    demo seeding) may import a wing; nothing else."""
    return relative == "klutch_gitops/cli.py" or relative.startswith("klutch_gitops/dev/")


def imported(path: Path) -> set[str]:
    """Every absolute module an Import or ImportFrom names, at module level or nested."""
    modules: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module)
    return modules


def wings_imported(path: Path) -> set[str]:
    return {m.split(".")[0] for m in imported(path)} & set(WINGS)


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_the_imports_are_found_nested_too(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("import os\n\ndef f():\n    from reconciler.manager import Reconciler\n")
    assert wings_imported(module) == {"reconciler"}


@pytest.mark.parametrize(
    ("wing", "other"), [("bind_api", "reconciler"), ("reconciler", "bind_api")]
)
def test_a_wing_does_not_import_the_other(wing: str, other: str) -> None:
    offenders = [
        str(path.relative_to(ROOT)) for path in sources(wing) if other in wings_imported(path)
    ]
    assert sources(wing)
    assert offenders == []


def test_only_the_entry_points_of_the_base_import_a_wing() -> None:
    importers = {
        str(path.relative_to(ROOT)) for path in sources("klutch_gitops") if wings_imported(path)
    }
    assert "klutch_gitops/cli.py" in importers  # the rule sees the imports it allows
    assert {m for m in importers if not may_import_a_wing(m)} == set()


def test_the_bind_api_loads_no_reconciler_module() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, bind_api.app, bind_api.server; "
            "print(' '.join(m for m in sys.modules if m.split('.')[0] == 'reconciler'))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert loaded.stdout.split() == []


MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60  # of the body: a CLI command's option declarations do not count
PRODUCT = ("klutch_gitops", "reconciler", "bind_api")


def long_functions(path: Path) -> list[str]:
    """``name:line (n lines)`` of every function whose body (docstring included, signature not)
    is longer than the limit."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = node.end_lineno - node.body[0].lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{node.name}:{node.lineno} ({length} lines)")
    return found


def test_the_function_rule_sees_a_long_body(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text("def f(\n    a: int,\n):\n" + "    a += 1\n" * 61)
    assert long_functions(module) == ["f:1 (61 lines)"]
    module.write_text("def f(\n" + "    a: int,\n" * 70 + "):\n" + "    a += 1\n" * 60)
    assert long_functions(module) == []


def test_no_product_module_is_longer_than_the_limit() -> None:
    long = {
        str(path.relative_to(ROOT)): lines
        for package in PRODUCT
        for path in sources(package)
        if (lines := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_no_product_function_is_longer_than_the_limit() -> None:
    long = {
        str(path.relative_to(ROOT)): found
        for package in PRODUCT
        for path in sources(package)
        if (found := long_functions(path))
    }
    assert long == {}
