"""Figures, each beside the baseline measured in the same run: a rich table and a JSON file."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


@dataclass
class Figure:
    """One measured value and the baseline it is compared with (lower is better for both)."""

    name: str
    unit: str  # "s" or "MiB"
    value: float
    baseline: str = ""
    baseline_value: float | None = None
    note: str = ""
    samples: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.name} | {self.baseline}"

    @property
    def ratio(self) -> float | None:
        if self.baseline_value is None or self.baseline_value <= 0:
            return None
        return self.value / self.baseline_value


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100), interpolated between the closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def show(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "s":
        return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"
    return f"{value:.1f} {unit}"


def render(
    figures: Sequence[Figure], previous: dict[str, float], title: str, console: Console
) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column("figure")
    table.add_column("ours", justify="right")
    table.add_column("baseline (same run)")
    table.add_column("baseline", justify="right")
    table.add_column("ratio", justify="right")
    if previous:
        table.add_column("ours, last run", justify="right")
    for figure in figures:
        ratio = figure.ratio
        row = [
            figure.name + (f"\n[dim]{figure.note}[/dim]" if figure.note else ""),
            show(figure.value, figure.unit),
            figure.baseline or "—",
            show(figure.baseline_value, figure.unit),
            "—" if ratio is None else f"{ratio:.2f}x",
        ]
        if previous:
            row.append(show(previous.get(figure.key), figure.unit))
        table.add_row(*row)
    console.print(table)


def load_previous(path: Path, sizes: dict[str, int]) -> dict[str, float]:
    """The figures of the last run written to ``path``, by key; empty when there is none or when
    it measured other sizes."""
    try:
        data = json.loads(path.read_text())
        if data.get("sizes") != sizes:
            return {}
        return {f"{f['name']} | {f['baseline']}": f["value"] for f in data["figures"]}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def save(path: Path, figures: Sequence[Figure], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{**asdict(f), "ratio": f.ratio} for f in figures]
    path.write_text(json.dumps({**meta, "figures": rows}, indent=2) + "\n")
