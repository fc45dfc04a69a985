"""How far the App copy of a claim has got, in the terms health checks read: pure decisions.

Flux's CEL status reader (fluxcd/pkg runtime/cel/status_evaluator.go) and kstatus call an object
in progress while ``status.observedGeneration`` differs from ``metadata.generation``; our Argo CD
Lua does the same (catalog/health/argocd/health.lua). Claims on a real Control Plane carry no
``status.observedGeneration`` at all, so we write it on the App copy ourselves: the App generation
whose spec the Control Plane copy holds and whose status reflects it. A deletion-protected claim
whose deletion we hold says ``Ready`` False, so that nobody reads the service as fine.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

READY = "Ready"
SYNCED = "Synced"
DELETION_HELD = "DeletionHeld"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _generation(obj: Mapping[str, Any]) -> int | None:
    return _int((obj.get("metadata") or {}).get("generation"))


def _condition(status: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for condition in (status or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def reflects_generation(upstream: Mapping[str, Any]) -> bool:
    """Whether the Control Plane copy's status is about its current generation: its controller
    says so where it says anything (top-level ``observedGeneration``, ``Synced``'s); a copy
    whose status carries neither (Crossplane claims on the local stack) has only its spec to go
    by, and one without a status has not been looked at."""
    generation = _generation(upstream)
    status = upstream.get("status")
    if not isinstance(status, Mapping):
        return False  # its controller has said nothing yet
    observed = [
        _int(status.get("observedGeneration")),
        _int((_condition(status, SYNCED) or {}).get("observedGeneration")),
    ]
    return generation is None or all(o is None or o >= generation for o in observed)


def observed_generation(
    upstream: Mapping[str, Any], live_app: Mapping[str, Any], in_sync: bool
) -> int | None:
    """The App copy's ``status.observedGeneration``: its ``generation`` once the Control Plane
    copy has its spec (``in_sync``) and that copy's status reflects it; otherwise the value the
    App copy already has (None when it has none): an unconfirmed change stays in progress."""
    previous = _int((live_app.get("status") or {}).get("observedGeneration"))
    generation = _generation(live_app)
    if in_sync and generation is not None and reflects_generation(upstream):
        return generation
    return previous


def app_generations(
    status: Mapping[str, Any],
    upstream: Mapping[str, Any],
    live_app: Mapping[str, Any],
    in_sync: bool,
) -> dict[str, Any]:
    """The Control Plane's status counted in App generations: ``observedGeneration`` on top is
    ``observed_generation``'s; a condition's, where the provider sets one, is the App generation
    when current (the copy has the App spec and the condition observed the copy's generation),
    else the App generation - 1. The copies' generations differ (a recreated copy starts at 1)."""
    result = copy.deepcopy(dict(status))
    result.pop("observedGeneration", None)
    observed = observed_generation(upstream, live_app, in_sync)
    if observed is not None:
        result["observedGeneration"] = observed
    upstream_generation, app_generation = _generation(upstream), _generation(live_app)
    if upstream_generation is None or app_generation is None:
        return result
    for condition in result.get("conditions") or []:
        value = _int(condition.get("observedGeneration")) if isinstance(condition, dict) else None
        if value is not None:
            current = in_sync and value >= upstream_generation
            condition["observedGeneration"] = (
                app_generation if current else max(app_generation - 1, 0)
            )
    return result


def refused(status: dict[str, Any], live_app: Mapping[str, Any]) -> dict[str, Any]:
    """A status that says the App copy's change was refused is about its current generation:
    observed (and refused), so Flux and Argo CD report it failed instead of waiting."""
    generation = _generation(live_app)
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def with_held(
    status: Mapping[str, Any], message: str, live_status: Mapping[str, Any] | None, now: str | None
) -> dict[str, Any]:
    """``status`` with ``Ready`` False, reason DeletionHeld: the object is being deleted and our
    finalizer holds it while its Control Plane copy is kept; ``lastTransitionTime`` is kept
    while the live claim already says so (none when ``now`` is None: Git's copy, which a time
    would change every pass)."""
    result = copy.deepcopy(dict(status))
    previous = _condition(live_status, READY) or {}
    since = previous.get("lastTransitionTime") if previous.get("reason") == DELETION_HELD else None
    condition = {"type": READY, "status": "False", "reason": DELETION_HELD, "message": message}
    if since or now:
        condition["lastTransitionTime"] = since or now
    result["conditions"] = [
        *(c for c in result.get("conditions") or [] if not _is(c, READY)),
        condition,
    ]
    return result


def _is(condition: Any, kind: str) -> bool:
    return isinstance(condition, Mapping) and condition.get("type") == kind
