"""Every registration's status, built the same way whether it comes from the config file or a
RepositoryBinding (``status.py``) from its record (``registration.py``): written to the
RepositoryBinding when it has one, kept for ``GET /registrations``, and exported as condition
gauges (``metrics.py``). Also the one summary log line per pass."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from klutch_gitops.kube import conditions
from reconciler import metrics
from reconciler.registration import Registration
from reconciler.status import Report, StatusWriter, binding_status
from reconciler.steering import resume_hint
from reconciler.sync.outcome import documents
from reconciler.sync.repository import Sync

log = logging.getLogger(__name__)


class Reporter:
    """Writes and shows what registrations report; what a report needs beyond the sync (the
    write-back error, the reconcile request answered) is in the record."""

    def __init__(self, status: StatusWriter) -> None:
        self.status = status

    def report(self, record: Registration) -> None:
        """Build the status of a registration that has a spec from its record, write it to its
        RepositoryBinding (only when new) and show it."""
        spec, sync, where = record.spec, record.sync, record.binding
        assert spec is not None
        report = Report(
            generation=record.observed_generation,
            latest_generation=record.generation,
            error=record.error,
            reference_error=record.reference_error,
            registered=sync is not None,
            head=sync.head if sync else None,
            last_pass=sync.last_pass if sync else None,
            pending=sync.pending if sync else True,
            last_status_commit=sync.last_status_commit if sync else None,
            conflicts=self._konnector_conflicts(record, sync) if sync else "",
            fetch_error=sync.fetch_error if sync else None,
            write_back_error=record.write_back_error,
            suspended=spec.suspend,
            resume_hint=resume_hint(record.origin, record.name),
            handled_reconcile_at=record.handled,
        )
        if where is not None:
            status = self.status.write(
                where.namespace,
                where.name,
                lambda old: binding_status(report, old, conditions.now()),
            )
        else:
            previous = record.shown[1] if record.shown else None
            status = binding_status(report, previous, conditions.now())
        record.shown = (spec, status)
        metrics.observe_status(record.name, status["conditions"], spec.suspend)

    def forget(self, record: Registration) -> None:
        """A registration that went, or another replica's now: no status shown, no metrics."""
        record.unreport()
        metrics.forget(record.name)

    def _konnector_conflicts(self, record: Registration, sync: Sync) -> str:
        """Foreign konnectors (``reconciler/sync/konnector.py``), with a Warning Event on the
        RepositoryBinding when a conflict starts or changes."""
        conflicts = sync.conflicts
        message = "; ".join(f"{v.message}. Fix: {v.fix}" for _, v in sorted(conflicts.items()))
        where = record.binding
        if not conflicts:
            record.konnector_warning = None
        elif record.konnector_warning != message and where is not None:
            record.konnector_warning = message
            self.status.event(where.namespace, where.name, "ForeignKonnector", message)
        return message


def shown(records: Iterable[Registration]) -> list[dict[str, Any]]:
    """``GET /registrations``: every reported registration's origin, repository and status, in
    the RepositoryBinding's shape (``klutch-gitops get --reconciler`` shows them)."""
    return [
        {
            "name": record.name,
            "source": str(record.origin),
            "spec": {
                "url": spec.url,
                "branch": spec.branch,
                "path": spec.path,
                "suspend": spec.suspend,
            },
            "status": status,
        }
        for record in sorted(records, key=lambda r: r.name)
        if record.shown is not None
        for spec, status in [record.shown]
    ]


def log_pass(name: str, sync: Sync, seconds: float, error: str | None) -> None:
    """One line per pass: what it applied and how it ended, under the logs' usual keys."""
    outcome = sync.last_pass
    extra: dict[str, Any] = {"repository": name, "seconds": round(seconds, 3)}
    if error is not None:
        extra.update(outcome="failed", error=error)
    elif sync.head is None:
        extra["outcome"] = "no-branch"
    elif outcome is not None:
        refused = outcome.refused
        extra.update(
            commit=outcome.commit[:12],
            claims=outcome.claims,
            refused=documents(refused),
            problems=len(outcome.found),
            outcome="refused" if refused else "apply-failed" if outcome.found else "ready",
        )
    log.info("pass", extra=extra)
