"""How far the App copy of a claim has got, in the terms health checks read: pure decisions.

Flux's CEL status reader (fluxcd/pkg runtime/cel/status_evaluator.go) calls an object in
progress while its top-level ``status.observedGeneration`` differs from ``metadata.generation``,
before any expression; our expressions and Argo CD Lua (catalog/health/) do the same for the
``Ready`` and ``Synced`` conditions' ``observedGeneration``. Crossplane's own claim schema
declares no top-level field (1.20's internal/xcrd/schemas.go, 2.x's
``CompositeResourceStatusProps``), but it merges an XRD's ``status`` properties into the claim
CRD it generates (1.20's internal/xcrd/crd.go ``genCrdVersion``), and the catalog's XRDs declare
``observedGeneration``; the App CRD is the export's copy of that schema, which Klutch's
konnector keeps equal, and a server-side apply of an undeclared field fails. So each field is
written exactly where the App schema declares it: the top-level one wherever the catalog's XRDs
are applied (both Crossplane lines), the conditions' on Crossplane 2 only.
What a pass adds to the status (a refusal, a held deletion) is in ``app_status``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

READY = "Ready"
SYNCED = "Synced"
DELETION_HELD = "DeletionHeld"
PROGRESS_CONDITIONS = (READY, SYNCED)
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def generation_of(obj: Mapping[str, Any]) -> int | None:
    return _int((obj.get("metadata") or {}).get("generation"))


def condition_of(status: Mapping[str, Any] | None, kind: str) -> Mapping[str, Any] | None:
    for condition in (status or {}).get("conditions") or []:
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return None


def _properties(schema: Any) -> Mapping[str, Any]:
    return (schema.get("properties") or {}) if isinstance(schema, Mapping) else {}


def conditions_take_generation(schema: Mapping[str, Any]) -> bool:
    """Whether a claim schema (an export's openAPIV3Schema, which the App CRD copies) lets a
    status condition carry ``observedGeneration``: Crossplane 2's claims declare it, 1.20's do
    not; a status or condition that preserves unknown fields takes it too."""
    status = _properties(schema).get("status")
    if not isinstance(status, Mapping):
        return False
    conditions = _properties(status).get("conditions")
    if not isinstance(conditions, Mapping):
        return status.get(PRESERVE) is True
    items = conditions.get("items")
    if not isinstance(items, Mapping):
        return False
    return "observedGeneration" in _properties(items) or items.get(PRESERVE) is True


def status_takes_generation(schema: Mapping[str, Any]) -> bool:
    """Whether a claim schema declares a top-level ``status.observedGeneration``: the catalog's
    XRDs do on every Crossplane line (Crossplane copies an XRD's status properties into the
    claim CRD); a claim kind without it (another platform's XRD) gets none written."""
    status = _properties(schema).get("status")
    if not isinstance(status, Mapping):
        return False
    return "observedGeneration" in _properties(status) or status.get(PRESERVE) is True


def reflects_generation(upstream: Mapping[str, Any]) -> bool:
    """Whether the Control Plane copy's status is about its current generation: its controller
    says so where it says anything (top-level ``observedGeneration``, ``Synced``'s); a copy
    whose status carries neither (Crossplane 1.20's claims) has only its spec to go by, and
    one without a status has not been looked at."""
    generation = generation_of(upstream)
    status = upstream.get("status")
    if not isinstance(status, Mapping):
        return False  # its controller has said nothing yet
    observed = [
        _int(status.get("observedGeneration")),
        _int((condition_of(status, SYNCED) or {}).get("observedGeneration")),
    ]
    return generation is None or all(o is None or o >= generation for o in observed)


def observed_generation(
    upstream: Mapping[str, Any],
    live_app: Mapping[str, Any],
    in_sync: bool,
    kind: str | None = READY,
) -> int | None:
    """What the App copy's ``kind`` condition (None: its top-level status) says it observed,
    where the provider said nothing: the App ``generation`` once the Control Plane copy has its
    spec (``in_sync``) and that copy's status reflects it; otherwise the live App's previous
    value, or the generation before (an unconfirmed change stays in progress). None without a
    generation. On Crossplane 1.20 the copy's status counts no generation at all, so
    "reflects it" can only mean the copy has the spec: the claim reads current from the pass
    that saw its spec taken in, before Crossplane has acted on it (its conditions then tell)."""
    generation = generation_of(live_app)
    if generation is None:
        return None
    if in_sync and reflects_generation(upstream):
        return generation
    status = live_app.get("status")
    held = status if kind is None else condition_of(status, kind)
    previous = _int((held or {}).get("observedGeneration"))
    return previous if previous is not None else max(generation - 1, 0)


def app_generations(
    status: Mapping[str, Any],
    upstream: Mapping[str, Any],
    live_app: Mapping[str, Any],
    in_sync: bool,
    stamps: bool = False,
    top: bool = False,
) -> dict[str, Any]:
    """The Control Plane's status counted in App generations (the copies' generations differ:
    a recreated copy starts at 1). A condition the provider stamped gets the App generation
    when current (the copy has the App spec and the condition observed the copy's
    generation), else the App generation - 1. ``Ready`` and ``Synced`` without one get
    ``observed_generation``'s only when the App schema declares it (``stamps``,
    ``conditions_take_generation``). The copy's top-level ``observedGeneration`` counts its
    own generations, so it is dropped; ours is written, by the same rule, only where the App
    schema declares it (``top``, ``status_takes_generation``)."""
    result = copy.deepcopy(dict(status))
    result.pop("observedGeneration", None)
    upstream_generation, app_generation = generation_of(upstream), generation_of(live_app)
    if app_generation is None:
        return result
    for condition in result.get("conditions") or []:
        if not isinstance(condition, dict):
            continue
        value = _int(condition.get("observedGeneration"))
        if value is not None:
            current = in_sync and (upstream_generation is None or value >= upstream_generation)
            condition["observedGeneration"] = (
                app_generation if current else max(app_generation - 1, 0)
            )
        elif stamps and condition.get("type") in PROGRESS_CONDITIONS:
            ours = observed_generation(upstream, live_app, in_sync, condition["type"])
            if ours is not None:
                condition["observedGeneration"] = ours
    if top:
        result["observedGeneration"] = observed_generation(upstream, live_app, in_sync, None)
    return result
