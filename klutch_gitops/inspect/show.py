"""Printing objects of one kind in the chosen ``-o`` format, once or as a watch."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from klutch_gitops.inspect import claims, repositories
from klutch_gitops.inspect.table import GAP, Output, document, lines, name_of


@dataclass(frozen=True)
class View:
    """A kind's columns: its headers and one object's cells, both for (wide, all namespaces)."""

    headers: Callable[[bool, bool], list[str]]
    row: Callable[[Mapping[str, Any], bool, bool], list[str]]
    nothing: str  # kubectl's "No resources found" names the kind


REPOSITORIES = View(repositories.headers, repositories.row, "No RepositoryBindings found")
CLAIMS = View(
    lambda _wide, all_ns: claims.headers(all_ns),
    lambda obj, _wide, all_ns: claims.row(obj, all_ns),
    "No claims found",
)


def render(
    view: View, objects: list[dict[str, Any]], output: Output, all_namespaces: bool, where: str
) -> list[str]:
    """The lines ``klutch-gitops get`` prints for ``objects``; ``where`` ends the empty notice."""
    if output in (Output.json, Output.yaml):
        return [document(objects, output)]
    if output is Output.name:
        return [name_of(obj) for obj in objects]
    if not objects:
        return [f"{view.nothing}{where}."]
    wide = output is Output.wide
    return lines(
        view.headers(wide, all_namespaces), (view.row(o, wide, all_namespaces) for o in objects)
    )


def widths_of(table: list[str], view: View, wide: bool, all_namespaces: bool) -> list[int]:
    """Column widths of a printed table, so that watch rows line up under its header."""
    headers = view.headers(wide, all_namespaces)
    if not table or not table[0].startswith(headers[0]):
        return [len(h) for h in headers]
    header = table[0]
    starts = [header.index(h) for h in headers]
    return [b - a - len(GAP) for a, b in itertools.pairwise(starts)] + [0]


def watch_lines(
    view: View,
    changed: Iterable[dict[str, Any]],
    output: Output,
    all_namespaces: bool,
    widths: list[int],
) -> Iterable[str]:
    """One line (or document) per changed object, padded to ``widths`` in a table."""
    wide = output is Output.wide
    for obj in changed:
        if output in (Output.json, Output.yaml):
            yield document([obj], output, list_kind=False) + (
                "\n---" if output is Output.yaml else ""
            )
        elif output is Output.name:
            yield name_of(obj)
        else:
            cells = view.row(obj, wide, all_namespaces)
            padded = [c.ljust(w) for c, w in zip(cells, widths, strict=False)]
            yield GAP.join(padded).rstrip()
