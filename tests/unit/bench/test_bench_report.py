"""The benchmark's pure parts: percentiles, ratios, the table's rows, the last run's values, the
sizes a command line asks for, and the claim files a grown repository adds. No time is asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from bench.claims import claim_file, claim_files
from bench.reconciler import parse_args, sizes_of
from bench.report import Figure, load_previous, percentile, render, save, show


def test_percentile_interpolates_between_the_closest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)


def test_a_ratio_needs_a_positive_baseline() -> None:
    assert Figure("x", "s", 3.0, "b", 1.5).ratio == 2.0
    assert Figure("x", "s", 3.0, "b", 0.0).ratio is None
    assert Figure("x", "s", 3.0).ratio is None


def test_values_are_shown_in_the_unit_that_reads_best() -> None:
    assert show(0.4734, "s") == "473 ms"
    assert show(7.254, "s") == "7.25 s"
    assert show(331.66, "MiB") == "331.7 MiB"
    assert show(None, "s") == "—"


def cold_rows(n: int) -> list[Figure]:
    """The cold sync beside its three baselines, as bench/team.py and bench/flux.py make them."""
    name = f"cold sync, {n} claims → App + CP"
    return [
        Figure(name, "s", 7.25, f"kubectl apply --server-side -f, {n} files, one cluster", 4.23),
        Figure(name, "s", 7.25, f"concurrent server-side-apply writer, {n} claims into each", 5.0),
        Figure(name, "s", 7.25, f"Flux kustomize-controller v1.9.6, {n} files, App only", 14.5),
    ]


def test_one_figure_beside_several_baselines_is_one_row_each_with_its_ratio() -> None:
    figures = cold_rows(1000)
    assert len({f.key for f in figures}) == 3  # "ours, last run" finds each row
    console = Console(width=250, record=True)
    render(figures, {figures[2].key: 8.0}, "t", console)
    text = console.export_text()
    for ratio in ("1.71x", "1.45x", "0.50x"):
        assert ratio in text
    assert "8.00 s" in text  # the Flux row's last run


def test_the_last_run_counts_only_with_the_same_sizes(tmp_path: Path) -> None:
    path = tmp_path / "last.json"
    figures = cold_rows(200)
    save(path, figures, {"sizes": {"claims": 200, "push_sizes": [50, 200]}})
    assert json.loads(path.read_text())["figures"][0]["ratio"] == pytest.approx(7.25 / 4.23)
    previous = load_previous(path, {"claims": 200, "push_sizes": [50, 200]})
    assert previous == {f.key: 7.25 for f in figures}
    assert load_previous(path, {"claims": 200, "push_sizes": [50, 1000]}) == {}
    assert load_previous(tmp_path / "missing.json", {}) == {}


def test_push_sizes_default_to_three_and_to_two_small_ones_in_a_quick_run() -> None:
    assert sizes_of(parse_args([])).push_sizes == (200, 1000, 5000)
    assert sizes_of(parse_args(["--quick"])).push_sizes == (50, 200)
    chosen = sizes_of(parse_args(["--push-sizes", "300,100", "--ssa-inflight", "8"]))
    assert chosen.push_sizes == (300, 100)
    assert chosen.ssa_inflight == 8
    assert sizes_of(parse_args([])).ssa_inflight == 16


def test_a_grown_repository_gets_the_next_numbers() -> None:
    grown = claim_files("team", 3, start=200)
    assert list(grown) == [claim_file(200), claim_file(201), claim_file(202)]
    assert "name: db-00201" in grown[claim_file(201)]
    assert "namespace: team" in grown[claim_file(201)]
