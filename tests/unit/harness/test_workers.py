"""How a run is split over pytest-xdist workers: which tests share a worker, which ports."""

from __future__ import annotations

from itertools import pairwise

from tests.workers import BLOCK_SIZE, port_blocks, work_unit


def test_a_module_is_its_own_unit() -> None:
    nodeid = "tests/integration/test_bindings.py::test_a[x]"
    assert work_unit(nodeid, "def test_a(): ...") == "tests/integration/test_bindings.py"


def test_the_chaos_tier_and_the_peers_are_one_unit_each() -> None:
    """Their conftests start a stack, Flux and Argo CD once per worker that runs them."""
    for folder in ("chaos", "peers"):
        nodeids = [f"tests/{folder}/test_{n}.py::test_{n}" for n in ("a", "b")]
        assert {work_unit(nodeid, "") for nodeid in nodeids} == {folder}


def test_the_modules_that_may_start_the_other_crossplane_line_share_a_unit() -> None:
    units = {
        work_unit(f"tests/integration/{module}.py::test_x", f"from .catalogstack import {name}")
        for module, name in (("test_catalog", "other_line_stack"), ("test_x", "stack_for_line"))
    }
    assert units == {"crossplane-other-line"}


def test_the_port_blocks_do_not_overlap_and_stay_below_the_ephemeral_range() -> None:
    bounds = [tuple(int(p) for p in block.split("-")) for block in port_blocks()]
    assert all(last - first + 1 == BLOCK_SIZE for first, last in bounds)
    assert all(a[1] < b[0] for a, b in pairwise(bounds))
    assert bounds[-1][1] < 32768  # Linux's first ephemeral port
