"""How a live App claim tells on itself: its ``Synced`` condition and the reasons of its Events.

A change Git asks for that a pass refuses (the loader refused the document, or the Control Plane
refused the apply) leaves the live claim at its old spec, which would otherwise look fine.
The claim then says so in Crossplane's words — ``Synced`` False with reason ``ReconcileError``
(TypeSynced, ReasonReconcileError and ReasonReconcileSuccess in crossplane/crossplane-runtime
apis/common/v1/condition.go) — on top of the status mirrored from its Control Plane copy; once
fixed, the mirrored status (the provider's own ``Synced``) is all it shows again.
Pure decisions: no I/O.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from klutch_gitops.manifests import Identity, Rejection

SYNCED = "Synced"
RECONCILE_ERROR = "ReconcileError"
# Normal Events, on change only: Flux's and Crossplane's vocabulary
APPLIED = "Synced"  # the Control Plane copy was created or changed
DELETED = "Deleted"  # the Control Plane copy is gone, the App claim released


def refusal_message(rejection: Rejection) -> str:
    """File, document, field, what is wrong and the fix, in one line."""
    where = rejection.file
    if rejection.document is not None:
        where += f" (document {rejection.document + 1})"
    if rejection.field:
        where += f", field {rejection.field}"
    return f"{where}: {rejection.message}; fix: {rejection.fix}"


def refusals_by_claim(refusals: tuple[Rejection, ...]) -> dict[Identity, str]:
    """The first refusal of every claim a refusal names, as the message its condition shows."""
    found: dict[Identity, str] = {}
    for rejection in refusals:
        if rejection.identity is not None and rejection.identity not in found:
            found[rejection.identity] = refusal_message(rejection)
    return found


def synced_error(conditions: Any) -> Mapping[str, Any] | None:
    """The ``Synced`` condition among ``conditions`` when it is our ReconcileError."""
    for condition in conditions if isinstance(conditions, list) else []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == SYNCED
            and condition.get("reason") == RECONCILE_ERROR
            and condition.get("status") == "False"
        ):
            return condition
    return None


def with_refusal(
    status: Mapping[str, Any], message: str, live_status: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
    """``status`` with ``Synced`` False, ReconcileError and ``message`` instead of its own
    ``Synced``; ``lastTransitionTime`` is kept while the live claim already says False."""
    result = copy.deepcopy(dict(status))
    conditions = [
        c
        for c in result.get("conditions") or []
        if not (isinstance(c, Mapping) and c.get("type") == SYNCED)
    ]
    previous = next(
        (
            c
            for c in (live_status or {}).get("conditions") or []
            if isinstance(c, Mapping) and c.get("type") == SYNCED and c.get("status") == "False"
        ),
        None,
    )
    conditions.append(
        {
            "type": SYNCED,
            "status": "False",
            "reason": RECONCILE_ERROR,
            "message": message,
            "lastTransitionTime": (previous or {}).get("lastTransitionTime") or now,
        }
    )
    result["conditions"] = conditions
    return result
