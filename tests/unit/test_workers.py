"""How a run is split over pytest-xdist workers: which tests share a worker, which ports."""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path
from types import ModuleType

from tests.workers import BLOCK_SIZE, port_blocks, work_group

ROOT = Path("/repo")


def module(*names: str) -> ModuleType:
    made = ModuleType("test_module")
    for name in names:
        setattr(made, name, lambda: None)
    return made


def test_a_module_is_its_own_unit() -> None:
    path = ROOT / "tests" / "integration" / "test_bindings.py"
    assert work_group(path, module(), ROOT) == "tests/integration/test_bindings"


def test_the_chaos_tier_and_the_peers_are_one_unit_each() -> None:
    """Their conftests start a stack, Flux and Argo CD once per worker that runs them."""
    for folder in ("chaos", "peers"):
        paths = [ROOT / "tests" / folder / f"test_{n}.py" for n in ("a", "b")]
        assert {work_group(path, module(), ROOT) for path in paths} == {folder}


def test_the_modules_that_may_start_the_other_crossplane_line_share_a_unit() -> None:
    groups = {
        work_group(ROOT / "tests" / "integration" / "test_crossplane.py", module(name), ROOT)
        for name in ("stack_for_line", "other_line_stack")
    }
    assert groups == {"crossplane-other-line"}


def test_the_port_blocks_do_not_overlap_and_stay_below_the_ephemeral_range() -> None:
    bounds = [tuple(int(p) for p in block.split("-")) for block in port_blocks()]
    assert all(last - first + 1 == BLOCK_SIZE for first, last in bounds)
    assert all(a[1] < b[0] for a, b in pairwise(bounds))
    assert bounds[-1][1] < 32768  # Linux's first ephemeral port
