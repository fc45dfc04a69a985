"""kubectl's way of printing: padded columns, NAMESPACE first only across namespaces, ages like
``3m20s``, and ``-o name|json|yaml`` for scripts."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

import yaml

GAP = "   "  # kubectl's tabwriter pads to the widest cell and three spaces


class Output(StrEnum):
    table = "table"
    wide = "wide"
    yaml = "yaml"
    json = "json"
    name = "name"


def age(created: str | None, now: dt.datetime | None = None) -> str:
    """kubectl's AGE: k8s.io/apimachinery/pkg/util/duration/duration.go, HumanDuration."""
    if not created:
        return "<unknown>"
    then = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    seconds = int(((now or dt.datetime.now(dt.UTC)) - then).total_seconds())
    if seconds < -1:
        return "<invalid>"
    seconds = max(seconds, 0)
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if seconds < 120:
        return f"{seconds}s"
    if minutes < 10:
        return f"{minutes}m{seconds % 60}s" if seconds % 60 else f"{minutes}m"
    if minutes < 180:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if hours < 192:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    if days < 365 * 8:
        return f"{days // 365}y{days % 365}d" if days % 365 else f"{days // 365}y"
    return f"{days // 365}y"


def short(text: str | None, width: int) -> str:
    """At most ``width`` characters, cut ones marked with ``...``; one line."""
    flat = " ".join((text or "").split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def lines(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Padded columns, header first; trailing blanks stripped."""
    table = [list(headers), *(list(row) for row in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(len(headers))]
    return [
        GAP.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in table
    ]


def name_of(obj: Mapping[str, Any]) -> str:
    """``-o name``: ``<kind>.<group>/<name>`` in lower case, as kubectl's NamePrinter writes it
    (k8s.io/cli-runtime/pkg/printers/name.go: strings.ToLower(groupKind.String()))."""
    group = obj.get("apiVersion", "").rpartition("/")[0]
    kind = f"{obj.get('kind', '')}.{group}" if group else obj.get("kind", "")
    return f"{kind.lower()}/{obj['metadata']['name']}"


def document(objects: list[dict[str, Any]], output: Output, list_kind: bool = True) -> str:
    """``-o json|yaml``: one object as itself, several (or a list request) as a v1 List."""
    body: Any = (
        {"apiVersion": "v1", "kind": "List", "items": objects, "metadata": {"resourceVersion": ""}}
        if list_kind
        else objects[0]
    )
    if output is Output.json:
        return json.dumps(body, indent=4)
    return yaml.safe_dump(body, sort_keys=False).rstrip("\n")
