"""Package rules: the two wings (``bind_api`` and ``reconciler``) never import each other, no
product module imports itself back, the base holds only what two parts use, every fixed API
resource is spelled in one of two homes, and no product module or function outgrows what one
person reads at once.

What they share (the Klutch consumer protocol, the work queue) lives in ``klutch_gitops``; there,
only the entry points and the dev/local-stack code may import a wing.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
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
            length = (node.end_lineno or node.lineno) - node.body[0].lineno + 1
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


# -- the import graph of the product ---------------------------------------------------------


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# The product and the catalog's local backend, which imports the base as the product does.
GRAPHED = (*PRODUCT, "klutch_local")


def import_graph(root: Path = ROOT, packages: tuple[str, ...] = GRAPHED) -> dict[str, set[str]]:
    """Module → the product modules it imports: every import statement, at module level, in a
    function or under ``if TYPE_CHECKING``, relative ones resolved; ``from p import m`` names the
    module ``p.m`` when there is one. Importing ``a.b.c`` runs ``a`` and ``a.b`` first, so those
    packages count too (except the importer's own, which are running already)."""
    paths = {
        module_name(p, root): p for package in packages for p in (root / package).rglob("*.py")
    }
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        here = name if path.name == "__init__.py" else name.rpartition(".")[0]
        named: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                named.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = here.split(".")[: len(here.split(".")) - node.level + 1]
                    base = ".".join([*package, *([node.module] if node.module else [])])
                named.update(
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths else base
                    for alias in node.names
                )
        own = {".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)}
        graph[name] = set()
        for module in named:
            while module and module not in paths:  # a name in a module: the module
                module = module.rpartition(".")[0]
            parts = module.split(".")
            graph[name].update(
                ancestor
                for i in range(1, len(parts) + 1)
                if (ancestor := ".".join(parts[:i])) in paths and ancestor not in own
            )
        graph[name].discard(name)
    return graph


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[start])
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The groups of modules that import each other, directly or through others."""
    reach = {module: reachable(graph, module) for module in graph}
    return {
        frozenset({m} | {other for other in reach[m] if m in reach[other]})
        for m in graph
        if m in reach[m]
    }


def test_the_cycle_rule_sees_an_import_in_a_function(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import f\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from . import a\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.py").write_text("import pkg.a\n")
    graph = import_graph(tmp_path, ("pkg", "other"))
    assert graph["pkg.b"] == {"pkg.a"}
    assert graph["pkg.c"] == {"pkg.a"}  # pkg runs already: c is in it
    assert graph["other.x"] == {"pkg", "pkg.a"}
    assert cycles(graph) == {frozenset({"pkg.a", "pkg.b"})}


def test_no_product_modules_import_each_other() -> None:
    """Counted are imports in functions and under ``TYPE_CHECKING`` too: an import moved into a
    function still makes each module need the other (to read, test or move it); it hides a cycle
    from Python, not from the person changing the code. errors.py <-> kube/client.py was one."""
    assert cycles(import_graph()) == set()


# -- the base holds what two parts use --------------------------------------------------------

PARTS = {
    "reconciler": ("reconciler",),
    "bind API": ("bind_api",),
    "klutch-bind": ("klutch_gitops.bind",),
    "klutch-gitops CLI": (
        "klutch_gitops.cli",
        "klutch_gitops.cli_errors",
        "klutch_gitops.inspect",
        "klutch_gitops.lazy_group",  # loads `dev` when it runs
        "klutch_gitops.server_extra",  # which commands need the `server` extra
    ),
    "local kit": ("klutch_gitops.dev",),
    "local backend": ("klutch_local",),
}
# Used by one part (the reconciler's registrations), kept in the base while the one registration
# schema (issue 28) reshaped it: remove an entry when its module moves.
SINGLE_USE = {"klutch_gitops.repository_config"}


def part_of(module: str) -> str | None:
    for part, prefixes in PARTS.items():
        if any(module == p or module.startswith(f"{p}.") for p in prefixes):
            return part
    return None


def base_unit(module: str) -> str | None:
    """The base's unit a module is in: a top-level module of ``klutch_gitops``, or one of its
    subpackages (kube/, models/, tenant_kubeconfig/) as a whole; None for a part's module or the
    package itself."""
    parts = module.split(".")
    if parts[0] != "klutch_gitops" or len(parts) == 1 or part_of(module):
        return None
    return ".".join(parts[:2])


def users(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Base unit → the parts that import it, directly or through other base modules."""
    used: dict[str, set[str]] = {u: set() for m in graph if (u := base_unit(m))}
    for module in graph:
        part = part_of(module)
        if part is None:
            continue
        seen: set[str] = set()
        todo = list(graph[module])
        while todo:
            other = todo.pop()
            if other in seen or (unit := base_unit(other)) is None:
                continue
            seen.add(other)
            used[unit].add(part)
            todo.extend(graph[other])
    return used


def test_the_base_rule_counts_use_through_the_base(tmp_path: Path) -> None:
    graph = {
        "reconciler.a": {"klutch_gitops.kube.x"},
        "klutch_gitops.kube.x": {"klutch_gitops.errors"},
        "klutch_gitops.bind.cli": {"klutch_gitops.errors"},
        "klutch_gitops.errors": set(),
    }
    assert users(graph) == {
        "klutch_gitops.kube": {"reconciler"},
        "klutch_gitops.errors": {"reconciler", "klutch-bind"},
    }


def test_the_base_holds_only_what_two_parts_use() -> None:
    """The parts are the reconciler, the bind API, klutch-bind (``klutch_gitops/bind``), the
    klutch-gitops command line (``cli.py``, ``cli_errors.py``, ``inspect/``, ``lazy_group.py``,
    ``server_extra.py``), the local kit (``dev/``) and the catalog's local backend
    (``klutch_local``); the base is the rest of ``klutch_gitops``, each top-level module
    or subpackage one unit. Every unit is imported, directly or through other base modules, by
    at least two parts: what one part alone uses belongs in that part (tests and bench do not
    count)."""
    used = users(import_graph())
    single = {unit for unit, parts in used.items() if len(parts) < 2}
    assert single >= SINGLE_USE, f"used by two parts now, so not SINGLE_USE: {SINGLE_USE - single}"
    assert {unit: sorted(used[unit]) for unit in single - SINGLE_USE} == {}


# -- every fixed API resource in one of two homes ---------------------------------------------

GVR_HOMES = ("klutch_gitops/apis.py", "klutch_gitops/kube/resources.py")


def fixed_resources(path: Path) -> list[int]:
    """Lines of ``Resource(...)`` calls whose plural is written out: a fixed group/version/
    resource. One built from data (an export's plural, a discovered kind) is not."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Resource":
            plural = node.args[2] if len(node.args) > 2 else None
            plural = next((k.value for k in node.keywords if k.arg == "plural"), plural)
            if isinstance(plural, ast.Constant):
                lines.append(node.lineno)
    return lines


def test_the_resource_rule_tells_fixed_from_built(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        'A = Resource("", "v1", "secrets")\n'
        'B = Resource(group="", version="v1", plural="leases")\n'
        "def f(e):\n    return Resource(e.group, e.version, e.plural)\n"
    )
    assert fixed_resources(module) == [1, 2]


def test_fixed_api_resources_are_spelled_only_in_their_two_homes() -> None:
    """Klutch's kinds (and its Control Plane's Crossplane kinds) in ``apis.py``, Kubernetes' own
    in ``kube/resources.py``: a twin elsewhere drifts from them unseen. (``klutch_local``, a
    package of its own, spells its own API group in ``klutch_local/provider/api.py``.)"""
    spelled = {
        str(path.relative_to(ROOT)): lines
        for package in PRODUCT
        for path in sources(package)
        if (lines := fixed_resources(path))
    }
    assert set(GVR_HOMES) <= set(spelled)
    assert {p: lines for p, lines in spelled.items() if p not in GVR_HOMES} == {}
