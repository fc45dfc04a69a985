"""``.klutch/reconcile.yaml``: what each registration's last reconcile of a path reported.

One entry per registration under ``registrations``, so that registrations sharing a repository,
branch and path never overwrite each other's report; each write-back changes only its own entry,
computed again on the fresh tree when a push was rejected. No source commit: it changes with every
push, and a report that changes with every push costs a commit per push (issue 15).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ruamel.yaml.error import YAMLError

from reconciler.sync.outcome import Problem
from reconciler.yamledit import dump, load_all

HEADER = "# Written by klutch-gitops after each reconcile. Edits here are overwritten.\n"
_TIMESTAMP = "reconciledAt"
_ENTRIES = "registrations"


@dataclass(frozen=True)
class Summary:
    """What ``.klutch/reconcile.yaml`` reports about one reconcile of a repository."""

    source_commit: str  # named in the status commit's trailer, not in the report
    counts: Mapping[str, int]  # e.g. claims, applied, rejected, deleted
    rejections: Sequence[Problem]  # the loader's refused documents, then the stages' problems
    registration: str  # the report's entry this registration owns


def render_report(current: bytes | None, summary: Summary, now: datetime) -> bytes:
    """The reconcile report with this registration's entry in it: the current report when only
    the entry's timestamp would differ; other registrations' entries are kept as they are."""
    moment = now if now.tzinfo else now.replace(tzinfo=UTC)
    entry = {
        _TIMESTAMP: moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "counts": dict(summary.counts),
        "rejections": [rejection.as_dict() for rejection in summary.rejections],
    }
    entries = _entries(current)
    if current is not None and _same_but_time(entries.get(summary.registration), entry):
        return current
    entries[summary.registration] = entry
    return (HEADER + dump({_ENTRIES: dict(sorted(entries.items()))})).encode()


def _entries(current: bytes | None) -> dict[str, Any]:
    """The registrations' entries of a report; none from an unreadable or older report."""
    try:
        docs = load_all(current.decode()) if current is not None else []
    except (UnicodeDecodeError, YAMLError):
        return {}
    if len(docs) != 1 or not isinstance(docs[0], Mapping):
        return {}
    entries = docs[0].get(_ENTRIES)
    if not isinstance(entries, Mapping):
        return {}
    return {str(k): v for k, v in entries.items() if isinstance(v, Mapping)}


def _same_but_time(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    if old is None:
        return False
    return {k: v for k, v in old.items() if k != _TIMESTAMP} == {
        k: v for k, v in new.items() if k != _TIMESTAMP
    }
