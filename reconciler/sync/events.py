"""How a live App claim tells on itself: the reasons of its Events, and the line that says why a
pass refused its change.

A change Git asks for that a pass refuses (the loader refused the document, or the Control Plane
refused the apply) leaves the live claim at its old spec, which would otherwise look fine. The
claim then says so in Crossplane's words (ReasonReconcileError in crossplane/crossplane-runtime
apis/common/v1/condition.go): a Warning Event, and its ``Synced`` condition (``app_status``).
Pure decisions: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.manifests import Identity
from reconciler.sync.outcome import Problem

RECONCILE_ERROR = "ReconcileError"
# Normal Events, on change only: Flux's and Crossplane's vocabulary
APPLIED = "Synced"  # the Control Plane copy was created or changed
DELETED = "Deleted"  # the Control Plane copy is gone, the App claim released


def refusal_message(rejection: Problem) -> str:
    """File, document, field, what is wrong and the fix, in one line."""
    where = rejection.file
    if rejection.document is not None:
        where += f" (document {rejection.document + 1})"
    if rejection.field:
        where += f", field {rejection.field}"
    return f"{where}: {rejection.message}; fix: {rejection.fix}"


def refusals_by_claim(refusals: Iterable[Problem]) -> dict[Identity, str]:
    """The first refusal of every claim a refusal names, as the message its condition shows."""
    found: dict[Identity, str] = {}
    for rejection in refusals:
        if rejection.identity is not None and rejection.identity not in found:
            found[rejection.identity] = refusal_message(rejection)
    return found
