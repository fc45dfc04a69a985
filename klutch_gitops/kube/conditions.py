"""Status conditions in the shape of Kubernetes' metav1.Condition, set the way kstatus reads them.

A condition keeps its ``lastTransitionTime`` while its status stays (metav1's convention; the
local provider passes ``CROSSPLANE`` for crossplane-runtime's, where any change is a transition),
and carries the ``observedGeneration`` it was computed from. ``unchanged`` compares two statuses
without their times, so a writer skips a write that would only move a timestamp: an unchanged
object keeps its resourceVersion and wakes no watcher.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KSTATUS = ("status",)  # metav1.Condition: lastTransitionTime is when the status last changed
CROSSPLANE = ("status", "reason", "message", "observedGeneration")  # any change is a transition
TIMES = frozenset({"lastTransitionTime"})


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: bool | None, reason: str, message: str = "") -> dict[str, Any]:
    """A condition without times; ``None`` is the status ``Unknown``."""
    cond: dict[str, Any] = {
        "type": kind,
        "status": "Unknown" if status is None else "True" if status else "False",
        "reason": reason,
    }
    if message:
        cond["message"] = message
    return cond


def by_type(status: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """A status's conditions by type."""
    return {c["type"]: c for c in (status or {}).get("conditions") or []}


def set_condition(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any],
    generation: int | None,
    at: str,
    transition_on: Sequence[str] = KSTATUS,
) -> dict[str, Any]:
    """``new`` as it replaces ``old`` (the same type, or None): with ``observedGeneration`` (unless
    None), and ``old``'s lastTransitionTime when none of ``transition_on`` changed."""
    cond = dict(new)
    if generation is not None:
        cond["observedGeneration"] = generation
    moved = old is None or any(old.get(k) != cond.get(k) for k in transition_on)
    kept = None if old is None or moved else old.get("lastTransitionTime")
    cond["lastTransitionTime"] = kept or at
    return cond


def set_conditions(
    old: Iterable[Mapping[str, Any]],
    new: Iterable[Mapping[str, Any]],
    generation: int | None,
    at: str,
    transition_on: Sequence[str] = KSTATUS,
) -> list[dict[str, Any]]:
    """``old`` with each of ``new`` set (see ``set_condition``), sorted by type so an unchanged
    list is equal to the one before."""
    result = {c["type"]: dict(c) for c in old}
    for cond in new:
        result[cond["type"]] = set_condition(
            result.get(cond["type"]), cond, generation, at, transition_on
        )
    return sorted(result.values(), key=lambda c: c["type"])


def without_times(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """``status`` with its conditions' times left out, and the conditions by type."""
    status = dict(status or {})
    conditions = status.pop("conditions", None) or []
    status["conditions"] = {
        c["type"]: {k: v for k, v in c.items() if k not in TIMES} for c in conditions
    }
    return status


def unchanged(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """Whether two statuses say the same, whatever their times and the order of conditions."""
    return without_times(old) == without_times(new)
