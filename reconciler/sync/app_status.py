"""A claim's App status: one pure function of what a pass knows about the claim.

The App object shows its Control Plane copy's status, counted in App generations (``progress``),
and over it what the pass has to say about the claim: ``Synced`` False with reason
``ReconcileError`` while the pass refused its change — the loader refused its document, or a
cluster refused the apply (TypeSynced and ReasonReconcileError in crossplane/crossplane-runtime
apis/common/v1/condition.go) — so that health checks fail it rather than wait, and ``Ready``
False with reason ``DeletionHeld`` while our finalizer holds its deletion (``prune.finalize``),
so that nobody reads the service as fine. Once fixed, the mirrored status is all it shows again.
Both conditions are set by ``kube.conditions.set_condition``: each keeps its
``lastTransitionTime`` while it says the same.

A claim of a kind a foreign konnector serves is never mirrored (``konnector.refuse_foreign``): the
konnector writes its status. Nothing here does I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from klutch_gitops.kube.conditions import KSTATUS, condition, set_condition
from reconciler.sync.events import RECONCILE_ERROR
from reconciler.sync.progress import (
    DELETION_HELD,
    READY,
    SYNCED,
    app_generations,
    condition_of,
    generation_of,
)

# A Ready False for another reason (the provider's) is another transition than a held deletion.
HELD_TRANSITION = ("status", "reason")


@dataclass(frozen=True)
class AppStatusInputs:
    """What a claim's App status is computed from."""

    live: Mapping[str, Any]  # the App object as last seen: its status is what it says now
    copy: Mapping[str, Any]  # its Control Plane copy
    now: str  # the time a condition that changes gets
    in_sync: bool = True  # the copy has the App object's spec
    refused: str | None = None  # why the pass did not apply the claim's change
    held: str | None = None  # why the pass holds the object's deletion
    stamps: bool = False  # the App schema lets conditions carry observedGeneration
    top: bool = False  # the App schema declares a top-level status.observedGeneration


def app_status(inputs: AppStatusInputs) -> dict[str, Any] | None:
    """The status the App object gets; None when it keeps its own: the same, or the copy has
    none and there is nothing of ours to say or to clear.

    A refusal is about the App object's current generation: ``Synced`` and the status as a
    whole observed (and refused) it, so that Flux and Argo CD report the claim failed instead
    of waiting for it; each is stamped only where the App schema declares the field."""
    live, live_status = inputs.live, inputs.live.get("status")
    status = inputs.copy.get("status")
    if status is None:
        if inputs.refused is None and inputs.held is None and not told(live_status):
            return None
        status = {}
    status = app_generations(status, inputs.copy, live, inputs.in_sync, inputs.stamps, inputs.top)
    observed = generation_of(live)
    if inputs.refused is not None:
        refusal = condition(SYNCED, False, RECONCILE_ERROR, inputs.refused)
        stamp = observed if inputs.stamps else None
        status = _set(status, refusal, live_status, stamp, inputs.now, KSTATUS)
        if inputs.top and observed is not None:
            status["observedGeneration"] = observed
    if inputs.held is not None:
        holding = condition(READY, False, DELETION_HELD, inputs.held)
        status = _set(status, holding, live_status, None, inputs.now, HELD_TRANSITION)
    return None if status == live_status else status


def git_status(copy_status: Mapping[str, Any] | None, held: str | None) -> Mapping[str, Any] | None:
    """What Git gets for a claim: its Control Plane copy's status, with ``Ready`` False while
    its deletion is held; no times, which would change Git every pass."""
    if held is None:
        return copy_status
    return _replaced(copy_status or {}, condition(READY, False, DELETION_HELD, held))


def told(status: Mapping[str, Any] | None) -> bool:
    """Whether a status says our ``Synced`` False, ReconcileError: to be cleared once fixed."""
    conditions = (status or {}).get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping)
        and c.get("type") == SYNCED
        and c.get("reason") == RECONCILE_ERROR
        and c.get("status") == "False"
        for c in conditions
    )


def _set(
    status: Mapping[str, Any],
    new: Mapping[str, Any],
    live_status: Mapping[str, Any] | None,
    stamp: int | None,
    now: str,
    transition_on: Sequence[str],
) -> dict[str, Any]:
    """``status`` with ``new`` set over the live object's condition of its type."""
    previous = condition_of(live_status, new["type"])
    return _replaced(status, set_condition(previous, new, stamp, now, transition_on))


def _replaced(status: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``status`` with ``new`` last among its conditions, instead of its own of that type."""
    result = copy.deepcopy(dict(status))
    result["conditions"] = [
        *(
            c
            for c in result.get("conditions") or []
            if not (isinstance(c, Mapping) and c.get("type") == new["type"])
        ),
        dict(new),
    ]
    return result
