"""A RepositoryBinding's status, in kstatus' shape (the convention Flux and kstatus/cli-utils read).

Conditions, each with the ``observedGeneration`` it describes:

- ``Ready``: True (``Synced``) when the last pass applied the branch's head with nothing refused;
  False with the reason of what stops it (``SecretInvalid``, ``SyncFailed``, ``DocumentsRefused``,
  ``ForeignKonnector``, ``InvalidSpec``); Unknown (``Progressing``) while it reconciles.
- ``Reconciling``: True while work is under way: registering, the first fetch or pass, a new
  generation not yet passed, the namespace mapping pending, or a retry after a failed pass.
- ``Stalled``: True when only a person's change lets it progress: an invalid Secret reference,
  refused documents, a foreign konnector, an invalid spec.
- ``SecretValid`` and ``KonnectorConflict``, as before.

The status is built by pure functions and written only when it says something new: the times
of conditions whose status stayed are kept, and a pass that found nothing new writes nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from klutch_gitops.apis import REPOSITORY_BINDINGS
from klutch_gitops.kube import conditions
from klutch_gitops.kube.client import EVENTS, Kube, KubeError
from klutch_gitops.kube.conditions import condition
from reconciler.sync.events import warning_event
from reconciler.sync.outcome import PassOutcome

log = logging.getLogger(__name__)

MESSAGE_LIMIT = 1000
KONNECTOR_MESSAGE_LIMIT = 8000  # one conflict per kind a konnector binds: room for a few


@dataclass(frozen=True)
class Report:
    """What a registration knows about its repository when it reports."""

    generation: int | None  # the RepositoryBinding's metadata.generation the registration follows
    latest_generation: int | None = None  # the newest one seen; None: the same
    registered: bool = False  # a sync runs for it
    error: str | None = None  # the last pass (or registration) failed with this
    reference_error: str | None = None  # a Secret or file that could not be used
    head: str | None = None  # lastFetchedCommit
    last_pass: PassOutcome | None = None
    pending: bool = True  # the namespace mapping is not done
    last_status_commit: str | None = None
    conflicts: str = ""  # foreign konnectors, "" when none


def stalled(report: Report) -> tuple[str, str] | None:
    """(reason, message) when the repository cannot progress without a person's change."""
    if report.reference_error:
        return "SecretInvalid", report.reference_error
    if report.conflicts:
        return "ForeignKonnector", report.conflicts
    outcome = report.last_pass
    if outcome is not None and outcome.refused:
        first = outcome.refusals[0]
        return "DocumentsRefused", (
            f"{outcome.refused} document(s) refused, reasons in the write-back; the first: "
            f"{first.file}: {first.message}. Fix: {first.fix}"
        )
    return None


def reconciling(report: Report) -> tuple[str, str] | None:
    """(reason, message) while work on the repository is under way."""
    if report.error:
        return "Retrying", "the last attempt failed and is retried"
    if not report.registered:
        return "Registering", "the registration starts"
    if report.head is None:
        return "Fetching", "the branch is not fetched yet (or does not exist yet)"
    if report.last_pass is None:
        return "Progressing", "the first pass is under way"
    if report.latest_generation not in (None, report.generation):
        return "NewGeneration", f"generation {report.latest_generation} is not passed yet"
    if report.pending:
        return "NamespaceMappingPending", "an App namespace is not mapped yet"
    return None


def ready(report: Report, blocked: tuple[str, str] | None, busy: tuple[str, str] | None) -> dict:
    """Ready: a failed pass first (its error is the news), then what blocks, then work under way."""
    if report.error and not report.reference_error:
        return condition("Ready", False, "SyncFailed", report.error)
    if blocked is not None:
        return condition("Ready", False, *blocked)
    if busy is not None:
        return condition("Ready", None, "Progressing", busy[1])
    outcome = report.last_pass
    assert outcome is not None  # else busy
    return condition(
        "Ready", True, "Synced", f"applied {outcome.commit[:12]}: {outcome.claims} claim(s)"
    )


def binding_conditions(report: Report) -> list[dict[str, Any]]:
    """The conditions, without times."""
    blocked = stalled(report)
    busy = None if blocked else reconciling(report)
    found = [
        ready(report, blocked, busy),
        condition("Reconciling", busy is not None, *(busy or ("Done", "nothing under way"))),
        condition("Stalled", blocked is not None, *(blocked or ("NotStalled", "nothing blocks"))),
        condition(
            "SecretValid",
            not report.reference_error,
            "SecretInvalid" if report.reference_error else "SecretsResolved",
            report.reference_error or "every referenced Secret is usable",
        ),
    ]
    found = [{**c, "message": c["message"][:MESSAGE_LIMIT]} for c in found]
    if report.registered:
        found.append(konnector_conflict(report.conflicts))
    return found


def konnector_conflict(conflicts: str) -> dict[str, Any]:
    """KonnectorConflict: a Klutch konnector serves one of the repository's kinds for another
    consumer namespace (``reconciler/sync/konnector.py``)."""
    return condition(
        "KonnectorConflict",
        bool(conflicts),
        "ForeignKonnector" if conflicts else "NoForeignKonnector",
        (conflicts or "no Klutch konnector serves these kinds for another consumer namespace")[
            :KONNECTOR_MESSAGE_LIMIT
        ],
    )


def binding_status(report: Report, previous: Mapping[str, Any] | None, now: str) -> dict:
    """The RepositoryBinding's status after ``previous``: the times of unchanged conditions kept."""
    status: dict[str, Any] = {}
    if report.generation is not None:
        status["observedGeneration"] = report.generation
    if report.head:
        status["lastFetchedCommit"] = report.head
    outcome = report.last_pass
    if outcome is not None:
        status["lastAppliedCommit"] = outcome.commit
        status["claims"] = outcome.claims
        status["rejected"] = outcome.refused
        if outcome.refusals:
            status["refusals"] = outcome.first_refusals()
    if report.last_status_commit:
        status["lastStatusCommit"] = report.last_status_commit
    status["conditions"] = _replace(previous, binding_conditions(report), report.generation, now)
    return status


def invalid_spec_status(
    message: str, generation: int | None, previous: Mapping[str, Any] | None, now: str
) -> dict:
    """The status of a RepositoryBinding the reconciler will not follow: its spec says why."""
    message = message[:MESSAGE_LIMIT]
    found = [
        condition("Ready", False, "InvalidSpec", message),
        condition("Reconciling", False, "Done", "nothing under way"),
        condition("Stalled", True, "InvalidSpec", message),
    ]
    status: dict[str, Any] = {} if generation is None else {"observedGeneration": generation}
    status["conditions"] = _replace(previous, found, generation, now)
    return status


def _replace(
    previous: Mapping[str, Any] | None, found: list[dict], generation: int | None, now: str
) -> list[dict[str, Any]]:
    """``found`` as the conditions, with the times of those whose status stayed: a type not
    reported any more (KonnectorConflict before a sync runs, say) goes."""
    types = {c["type"] for c in found}
    old = [c for c in (previous or {}).get("conditions") or [] if c.get("type") in types]
    return conditions.set_conditions(old, found, generation, now)


class StatusWriter:
    """Writes RepositoryBinding statuses, each only when it differs from what was last written
    (or, before the first write, from the live one) other than in times."""

    def __init__(self, kube: Kube, live: Callable[[str, str], dict | None]) -> None:
        self.kube = kube
        self.live = live  # (namespace, name) -> the RepositoryBinding as last seen
        self.written: dict[tuple[str, str], dict] = {}

    def previous(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        known = self.written.get((namespace, name))
        return known if known is not None else (self.live(namespace, name) or {}).get("status")

    def write(self, namespace: str, name: str, build: Callable[[Mapping | None], dict]) -> None:
        """Write ``build(previous status)`` unless it says what the previous one says."""
        previous = self.previous(namespace, name)
        status = build(previous)
        if conditions.unchanged(previous, status):
            return
        try:
            self.kube.apply(
                REPOSITORY_BINDINGS,
                {
                    "apiVersion": REPOSITORY_BINDINGS.api_version,
                    "kind": "RepositoryBinding",
                    "metadata": {"name": name, "namespace": namespace},
                    "status": status,
                },
                force=True,
                subresource="status",
            )
        except KubeError as failure:
            log.warning(
                "could not report RepositoryBinding status",
                extra={"binding": f"{namespace}/{name}", "error": str(failure)},
            )
            return
        self.written[(namespace, name)] = status

    def forget(self, namespace: str, name: str) -> None:
        self.written.pop((namespace, name), None)

    def event(self, namespace: str, name: str, reason: str, message: str) -> None:
        """A Warning Event on the RepositoryBinding, where `kubectl describe` shows it."""
        live = self.live(namespace, name) or {"metadata": {}}
        meta = {"name": name, "namespace": namespace, "uid": live["metadata"].get("uid")}
        try:
            self.kube.create(
                EVENTS, warning_event(REPOSITORY_BINDINGS, {"metadata": meta}, reason, message)
            )
        except KubeError as error:
            log.warning(
                "could not record event",
                extra={"binding": f"{namespace}/{name}", "error": str(error)},
            )
