"""Every registration's status, built the same way whether it comes from the config file or a
RepositoryBinding (``status.py``): written to the RepositoryBinding when it has one, kept for
``GET /registrations``, and exported as condition gauges (``metrics.py``). Also the one summary
log line per pass."""

from __future__ import annotations

import logging
from typing import Any

from klutch_gitops.config import RegistrationSpec
from klutch_gitops.kube import conditions
from reconciler import metrics
from reconciler.status import Report, StatusWriter, binding_status
from reconciler.steering import resume_hint
from reconciler.sync.outcome import documents
from reconciler.sync.repository import RepositorySync

log = logging.getLogger(__name__)
BINDING_SOURCE = "RepositoryBinding "


def binding_name(spec: RegistrationSpec) -> tuple[str, str] | None:
    """(namespace, name) of the RepositoryBinding a registration comes from, if it does."""
    if not spec.source.startswith(BINDING_SOURCE):
        return None
    namespace, _, name = spec.source.removeprefix(BINDING_SOURCE).partition("/")
    return namespace, name


class Reporter:
    """What each registration last reported, and what a report needs beyond its sync: write-back
    results and the reconcile requests answered."""

    def __init__(self, status: StatusWriter) -> None:
        self.status = status
        # name -> (spec, status)
        self.shown: dict[str, tuple[RegistrationSpec, dict[str, Any]]] = {}
        self.write_back_errors: dict[str, str] = {}
        self.handled: dict[str, str] = {}  # name -> the reconcile request its last pass answered
        self.konnector_warnings: dict[str, str] = {}  # name -> conflict last evented

    def report(self, spec: RegistrationSpec, sync: RepositorySync | None, **known: Any) -> None:
        """Build the status of ``spec``'s registration from ``known`` (Report's fields) and its
        sync, write it to its RepositoryBinding (only when new) and show it."""
        name, where = spec.name, binding_name(spec)
        report = Report(
            **known,
            registered=sync is not None,
            head=sync.head if sync else None,
            last_pass=sync.last_pass if sync else None,
            pending=sync.pending if sync else True,
            last_status_commit=sync.last_status_commit if sync else None,
            conflicts=self._konnector_conflicts(spec, sync) if sync else "",
            fetch_error=sync.fetch_error if sync else None,
            write_back_error=self.write_back_errors.get(name),
            suspended=spec.suspend,
            resume_hint=resume_hint(where, name),
            handled_reconcile_at=self.handled.get(name),
        )
        if where is not None:
            status = self.status.write(
                *where, lambda old: binding_status(report, old, conditions.now())
            )
        else:
            previous = self.shown[name][1] if name in self.shown else None
            status = binding_status(report, previous, conditions.now())
        self.shown[name] = (spec, status)
        metrics.observe_status(name, status["conditions"], spec.suspend)

    def forget(self, name: str) -> None:
        """A registration that went: no status shown, no metrics."""
        for found in (self.shown, self.write_back_errors, self.handled, self.konnector_warnings):
            found.pop(name, None)
        metrics.forget(name)

    def registrations(self) -> list[dict[str, Any]]:
        """``GET /registrations``: every registration's source, repository and status, in the
        RepositoryBinding's shape (``klutch-gitops get --reconciler`` shows them)."""
        return [
            {
                "name": name,
                "source": spec.source,
                "spec": {
                    "url": spec.url,
                    "branch": spec.branch,
                    "path": spec.path,
                    "suspend": spec.suspend,
                },
                "status": status,
            }
            for name, (spec, status) in sorted(self.shown.items())
        ]

    def _konnector_conflicts(self, spec: RegistrationSpec, sync: RepositorySync) -> str:
        """Foreign konnectors (``reconciler/sync/konnector.py``), with a Warning Event on the
        RepositoryBinding when a conflict starts or changes."""
        conflicts = sync.conflicts
        message = "; ".join(f"{v.message}. Fix: {v.fix}" for _, v in sorted(conflicts.items()))
        where = binding_name(spec)
        if not conflicts:
            self.konnector_warnings.pop(spec.name, None)
        elif self.konnector_warnings.get(spec.name) != message and where is not None:
            self.konnector_warnings[spec.name] = message
            self.status.event(*where, "ForeignKonnector", message)
        return message


def log_pass(name: str, sync: RepositorySync, seconds: float, error: str | None) -> None:
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
