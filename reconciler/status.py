"""A RepositoryBinding's status, in kstatus' shape (the convention Flux and kstatus/cli-utils read).

Conditions, each with the ``observedGeneration`` it describes:

- ``Ready``: True (``Synced``) when the last pass applied the branch's head with nothing refused;
  False with the reason of what stops it (``SecretInvalid``, ``FetchFailed``, ``SyncFailed``,
  ``ApplyFailed``, ``DeletionHeld`` (only deletion-protected claims being deleted are held),
  ``WriteBackFailed``, ``DocumentsRefused``, ``ForeignKonnector``, ``InvalidSpec``); Unknown
  while it reconciles (``Progressing``) or is suspended (``Suspended``).
- ``Reconciling``: True while work is under way: registering, the first fetch or pass, a new
  generation not yet passed, the namespace mapping pending, or a retry after a failure (a failed
  fetch, pass, write-back, or a stage's problem: those heal without a person).
- ``Stalled``: True when only a person's change lets it progress: an invalid Secret reference,
  documents the loader refused, a foreign konnector, an invalid spec.
- ``Fetched``, ``Applied``, ``WrittenBack``: each step of the last pass, False with its error.
- ``SecretValid`` and ``KonnectorConflict``, as before.

A suspended registration keeps what its last pass reported and says how to resume.

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
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.conditions import condition
from klutch_gitops.kube.events import WARNING, EventRecorder
from reconciler.sync.outcome import PassOutcome, Problem, documents

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
    fetch_error: str | None = None  # the last fetch failed with this
    write_back_error: str | None = None  # the last write-back failed with this
    suspended: bool = False
    resume_hint: str = ""  # how a person resumes a suspended registration
    handled_reconcile_at: str | None = None  # the reconcile request the last pass answered


# What a suspended registration's status keeps from before: its last pass's figures.
KEPT_WHILE_SUSPENDED = (
    "lastFetchedCommit",
    "lastAppliedCommit",
    "claims",
    "rejected",
    "refusals",
    "lastStatusCommit",
    "lastHandledReconcileAt",
)


def describe(refusal: Problem) -> str:
    """A refusal on one line: file, document, field, message and fix."""
    where = refusal.file if refusal.document is None else f"{refusal.file}#{refusal.document}"
    if refusal.field:
        where += f" {refusal.field}"
    return f"{where}: {refusal.message}. Fix: {refusal.fix}"


def stalled(report: Report) -> tuple[str, str] | None:
    """(reason, message) when the repository cannot progress without a person's change."""
    if report.reference_error:
        return "SecretInvalid", report.reference_error
    if report.conflicts:
        return "ForeignKonnector", report.conflicts
    outcome = report.last_pass
    refused = outcome.refused if outcome is not None else ()
    if refused:
        return "DocumentsRefused", (
            f"{documents(refused)} document(s) refused, reasons in the write-back; the first: "
            + describe(refused[0])
        )
    return None


def stage_message(outcome: PassOutcome) -> str:
    """The first problems the stages found, retried on the next pass."""
    shown = "; ".join(describe(p) for p in outcome.found[:3])
    return f"{len(outcome.found)} problem(s) applying {outcome.commit[:12]}: {shown}"


def failed(report: Report) -> tuple[str, str] | None:
    """(reason, message) of a failure that is retried: fetch, pass, stages, write-back."""
    if report.fetch_error:
        return "FetchFailed", report.fetch_error
    if report.error and not report.reference_error:
        return "SyncFailed", report.error
    outcome = report.last_pass
    if outcome is not None and outcome.found:
        held = len(outcome.held) == len(outcome.found)
        return ("DeletionHeld" if held else "ApplyFailed"), stage_message(outcome)
    if report.write_back_error:
        return "WriteBackFailed", report.write_back_error
    return None


def reconciling(report: Report) -> tuple[str, str] | None:
    """(reason, message) while work on the repository is under way."""
    if report.error or failed(report):
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


def ready(
    report: Report, blocked: tuple[str, str] | None, busy: tuple[str, str] | None
) -> dict[str, Any]:
    """Ready: a failure first (its error is the news), then what blocks, then work under way."""
    failure = failed(report)
    if failure is not None and failure[0] in ("FetchFailed", "SyncFailed"):
        return condition("Ready", False, *failure)
    if blocked is not None:
        return condition("Ready", False, *blocked)
    if failure is not None:
        return condition("Ready", False, *failure)
    if busy is not None:
        return condition("Ready", None, "Progressing", busy[1])
    outcome = report.last_pass
    assert outcome is not None  # else busy
    return condition(
        "Ready", True, "Synced", f"applied {outcome.commit[:12]}: {outcome.claims} claim(s)"
    )


def binding_conditions(report: Report) -> list[dict[str, Any]]:
    """The conditions, without times."""
    if report.suspended:
        return suspended_conditions(report)
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
    if report.registered:
        found += step_conditions(report)
    found = [{**c, "message": c["message"][:MESSAGE_LIMIT]} for c in found]
    if report.registered:
        found.append(konnector_conflict(report.conflicts))
    return found


def suspended_conditions(report: Report) -> list[dict[str, Any]]:
    """Nothing is fetched, applied or written back: neither progressing nor stalled."""
    message = f"suspended: nothing is fetched, applied or written back; {report.resume_hint}"
    return [
        condition("Ready", None, "Suspended", message),
        condition("Reconciling", False, "Suspended", message),
        condition("Stalled", False, "NotStalled", "nothing blocks"),
    ]


def step_conditions(report: Report) -> list[dict[str, Any]]:
    """Fetched, Applied and WrittenBack: what each step of the last pass did."""
    outcome = report.last_pass
    if report.fetch_error:
        fetched = condition("Fetched", False, "FetchFailed", report.fetch_error)
    elif report.head:
        fetched = condition("Fetched", True, "Fetched", f"fetched {report.head[:12]}")
    else:
        fetched = condition("Fetched", None, "Fetching", "the branch is not fetched yet")
    if outcome is None:
        applied = condition("Applied", None, "Progressing", "no pass has completed yet")
    elif outcome.found:
        applied = condition("Applied", False, "ApplyFailed", stage_message(outcome))
    else:
        applied = condition("Applied", True, "Applied", f"applied {outcome.commit[:12]}")
    return [fetched, applied, written_back(report)]


def written_back(report: Report) -> dict[str, Any]:
    if report.write_back_error:
        return condition("WrittenBack", False, "WriteBackFailed", report.write_back_error)
    if report.last_pass is None:
        return condition("WrittenBack", None, "Pending", "no pass has observed anything yet")
    if report.last_status_commit:
        return condition(
            "WrittenBack", True, "WrittenBack", f"status committed {report.last_status_commit[:12]}"
        )
    return condition("WrittenBack", True, "UpToDate", "Git already says what the pass observed")


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


def binding_status(report: Report, previous: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    """The RepositoryBinding's status after ``previous``: the times of unchanged conditions kept."""
    status: dict[str, Any] = {}
    if report.suspended:
        status = {k: v for k, v in (previous or {}).items() if k in KEPT_WHILE_SUSPENDED}
    if report.generation is not None:
        status["observedGeneration"] = report.generation
    if report.handled_reconcile_at is not None:
        status["lastHandledReconcileAt"] = report.handled_reconcile_at
    if report.head:
        status["lastFetchedCommit"] = report.head
    outcome = report.last_pass
    if outcome is not None:
        status["lastAppliedCommit"] = outcome.commit
        status["claims"] = outcome.claims
        status["rejected"] = outcome.refused_documents
        if outcome.refusals:
            status["refusals"] = outcome.first_refusals()
    if report.last_status_commit:
        status["lastStatusCommit"] = report.last_status_commit
    status["conditions"] = _replace(previous, binding_conditions(report), report.generation, now)
    return status


def invalid_spec_status(
    message: str, generation: int | None, previous: Mapping[str, Any] | None, now: str
) -> dict[str, Any]:
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
    previous: Mapping[str, Any] | None,
    found: list[dict[str, Any]],
    generation: int | None,
    now: str,
) -> list[dict[str, Any]]:
    """``found`` as the conditions, with the times of those whose status stayed: a type not
    reported any more (KonnectorConflict before a sync runs, say) goes."""
    types = {c["type"] for c in found}
    old = [c for c in (previous or {}).get("conditions") or [] if c.get("type") in types]
    return conditions.set_conditions(old, found, generation, now)


class StatusWriter:
    """Writes RepositoryBinding statuses, each only when it differs from what was last written
    (or, before the first write, from the live one) other than in times."""

    def __init__(self, kube: Kube, live: Callable[[str, str], dict[str, Any] | None]) -> None:
        self.kube = kube
        self.live = live  # (namespace, name) -> the RepositoryBinding as last seen
        self.written: dict[tuple[str, str], dict[str, Any]] = {}
        self.events = EventRecorder(kube)

    def previous(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        known = self.written.get((namespace, name))
        return known if known is not None else (self.live(namespace, name) or {}).get("status")

    def write(
        self,
        namespace: str,
        name: str,
        build: Callable[[Mapping[str, Any] | None], dict[str, Any]],
    ) -> dict[str, Any]:
        """Write ``build(previous status)`` unless it says what the previous one says; return it."""
        previous = self.previous(namespace, name)
        status = build(previous)
        if conditions.unchanged(previous, status):
            return status
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
            return status
        self.written[(namespace, name)] = status
        return status

    def refused(self, namespace: str, name: str, generation: int | None, message: str) -> None:
        """A RepositoryBinding the reconciler will not follow (say, a file:// one stored before
        the CRD refused it) says why; written once per reason, so our own status update, which
        comes back as an event, does not write again."""
        self.write(
            namespace,
            name,
            lambda old: invalid_spec_status(message, generation, old, conditions.now()),
        )

    def forget(self, namespace: str, name: str) -> None:
        self.written.pop((namespace, name), None)

    def event(self, namespace: str, name: str, reason: str, message: str) -> None:
        """A Warning Event on the RepositoryBinding, where `kubectl describe` shows it; repeats
        aggregate (klutch_gitops/kube/events.py)."""
        live = self.live(namespace, name) or {"metadata": {}}
        meta = {"name": name, "namespace": namespace, "uid": live["metadata"].get("uid")}
        self.events.record(REPOSITORY_BINDINGS, {"metadata": meta}, WARNING, reason, message)
