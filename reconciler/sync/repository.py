"""The sync: everything the reconciler does for one registration, through its connection.

One ``sync`` pass runs the stages in order — fetch, desired state, App Cluster, Control Plane,
prune and finalize, status and credentials back — and schedules a write-back when what it observed
changed. Passes are cheap when nothing changed: cluster state comes from informer caches (the
``ClusterView``) and only differences are written. Informer events and source triggers enqueue
passes; the work queue serialises them per repository. Each stage is a module of its own and sees
the clusters only through the view.

With ``appSync: external`` Argo CD or Flux applies the claims to the App Cluster. A pass then
adopts the App objects that Git names (our label and finalizer, nothing else), mirrors what the
tool applied — not Git's newest commit, which the tool may not have synced yet — to the Control
Plane, and never applies spec to or prunes in the App Cluster. Deletion starts when the tool
deletes the App object: our finalizer holds it until the Control Plane copy is gone.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from klutch_gitops.config import Bot
from reconciler import metrics
from reconciler.git.checkout import Checkout
from reconciler.manifests import Identity
from reconciler.sync import konnector
from reconciler.sync.adoption import adopt, ahead_of_git, fetch_for, live_claims
from reconciler.sync.apply import Source, apply_claims
from reconciler.sync.changes import IncrementalLoader
from reconciler.sync.connection import Connection
from reconciler.sync.desired import DesiredState
from reconciler.sync.kinds import log_verdicts
from reconciler.sync.observe import observe
from reconciler.sync.outcome import Found, PassOutcome, documents
from reconciler.sync.prepare import preparing
from reconciler.sync.prune import finalize, prune
from reconciler.sync.unchanged import InSync, Quiet
from reconciler.sync.view import ClusterView
from reconciler.sync.writeback import Mode, ObservedStatus, Schedule
from reconciler.work import Key, Work

log = logging.getLogger(__name__)

# While a foreign konnector conflict stands, look again this often: its kubeconfig Secret may be
# pointed at our consumer namespace without any event the reconciler watches.
KONNECTOR_RECHECK_SECONDS = 30.0
# After an apply a cluster refused (an admission webhook down, a quota, a policy since changed),
# try again this often: nothing the reconciler watches says when the refusal ends, and the status
# promises a retry (Applied=False, Reconciling=True).
APPLY_RETRY_SECONDS = 10.0


class Sync:
    def __init__(
        self,
        connection: Connection,
        work_dir: Path,
        bot: Bot,
        batch_window: float,
        enqueue: Callable[[Key], None],
        enqueue_after: Callable[[Key, float], None],
    ) -> None:
        self.connection = connection
        self.spec = connection.spec
        self.name = connection.spec.name
        self.bot = connection.spec.write_back.author or bot
        self.batch_window = batch_window
        self._enqueue = enqueue
        self._enqueue_after = enqueue_after
        mode = Mode(self.spec.write_back.mode)
        self.external = self.spec.app_sync == "external"
        self.reader = Checkout.open_or_clone(
            self.spec.url, self.spec.branch, work_dir / self.name / "source", connection.credentials
        )
        self.writer = Checkout.open_or_clone(
            self.spec.url,
            self.spec.write_back.branch if mode is Mode.BRANCH else self.spec.branch,
            work_dir / self.name / "write-back",
            connection.credentials,
        )
        self.needs_fetch = True
        self.head: str | None = None
        self.fetch_error: str | None = None  # the last fetch failed with this
        self.view = ClusterView(
            connection, self.external, lambda: self._enqueue((Work.SYNC, self.name))
        )
        self.schedule = Schedule(mode, self.name)
        self._desired: tuple[tuple[str, tuple[str, ...]], DesiredState] | None = None
        self._loader = IncrementalLoader()
        self._in_sync = InSync()  # apply planning: the claims in sync as last seen
        self._quiet = Quiet()  # status mirroring: the claims that had nothing to write
        self.last_status_commit: str | None = None
        self.last_pass: PassOutcome | None = None  # None until a pass completes
        self.pending = True
        self._held: set[Identity] = set()  # deletion-protected App objects being deleted
        self._fetched_for: dict[Identity, str] = {}  # unnamed App objects -> resourceVersion
        self.konnectors: dict[str, konnector.Verdict] = {}  # export name -> Klutch's konnector
        self._konnector_logged: dict[str, str] = {}  # export name -> what was last logged
        self._lock = threading.Lock()

    def trigger_fetch(self) -> None:
        self.needs_fetch = True
        self._enqueue((Work.SYNC, self.name))

    def stop(self) -> None:
        self.view.stop()

    def settled(self) -> bool:
        """Every namespace mapped and every cache filled: a pass sees the whole picture."""
        return not self.pending and self.view.synced()

    @property
    def conflicts(self) -> dict[str, konnector.Verdict]:
        """The exported kinds a konnector serves for another consumer namespace."""
        return {name: v for name, v in self.konnectors.items() if v.conflict}

    # -- the pass ---------------------------------------------------------------------------

    def sync(self) -> None:
        """One pass: the stages in order; each one's problems are the pass's."""
        with self._lock:
            fetched = self.needs_fetch or self.head is None
            head = self._fetch()
            if head is None:
                log.info("branch does not exist yet", extra={"repository": self.name})
                return
            spec, view = self.spec, self.view
            raw_exports = view.list_exports()
            with preparing(
                view, raw_exports, spec.path, spec.consumer_namespace, spec.app_namespaces
            ) as preparation:
                desired = self._load_desired(head, raw_exports)
            self.konnectors, failed, pending = preparation.result()
            problems: list[Found] = [*failed]
            log_verdicts(self.name, self.konnectors, self._konnector_logged)
            mirrored = desired.claims
            if self.external:
                head, desired = self._catch_up(head, desired, raw_exports, fetched)
                mirrored, refused = adopt(
                    view, desired.claims, self.name, spec.app_namespaces, spec.path
                )
                problems += refused
            mirrored, foreign = konnector.refuse_foreign(
                desired.claims, mirrored, self.conflicts, lambda c: view.export_of(c).name
            )
            problems += foreign
            source = Source(self.name, spec.path, head, self.external)
            planned = self._in_sync.to_plan(view, mirrored, source, exports_version(raw_exports))
            refused_applies = apply_claims(view, planned, source)
            problems += refused_applies
            if not self.external:
                problems += prune(view, desired, self.conflicts)
            self._held, holding = finalize(
                view,
                self.name,
                spec.app_namespaces,
                spec.path,
                self.conflicts,
                self._held,
                in_git={c.identity for c in desired.claims},
            )
            problems += holding
            outcome = PassOutcome(head, len(mirrored), desired.rejections, tuple(problems))
            served = {n for n, v in self.konnectors.items() if v.state is not konnector.State.NONE}
            quiet = self._quiet.under(exports_version(raw_exports))
            statuses = observe(view, desired, mirrored, self.name, outcome.found, served, quiet)
            self._schedule_write_back(desired, statuses, problems)
            self.last_pass = outcome
            self._again(pending, retry=bool(refused_applies))

    def _fetch(self) -> str | None:
        """The branch's head, fetched when asked to (or never yet); None while it does not exist."""
        if self.needs_fetch or self.head is None:
            self.needs_fetch = False
            try:
                with metrics.FETCH_SECONDS.labels(self.name).time():
                    self.head = self.reader.fetch()
            except Exception as error:
                self.needs_fetch = True  # the next pass tries again
                self.fetch_error = str(error)
                raise
            self.fetch_error = None
        return self.head

    def _catch_up(
        self, head: str, desired: DesiredState, raw_exports: list[dict[str, Any]], fetched: bool
    ) -> tuple[str, DesiredState]:
        """Fetch once more when an App object shows the tool acted on a commit newer than the
        Git view held (unless this pass just fetched): an App event queues a pass without a
        fetch, and without a webhook a claim just pushed would otherwise wait for the next poll
        to be adopted, and one just pruned would be judged by the view that still names it."""
        found = ahead_of_git(
            live_claims(self.view), desired.claims, self.name, self.spec.app_namespaces
        )
        again = not fetched and fetch_for(found, self._fetched_for)
        self._fetched_for = found  # before the fetch: a failed one sets needs_fetch itself
        if not again:
            return head, desired
        log.info(
            "an App object is ahead of the Git view: fetching", extra={"repository": self.name}
        )
        self.needs_fetch = True
        head = self._fetch() or head
        return head, self._load_desired(head, raw_exports)

    def _again(self, pending: bool, retry: bool) -> None:
        """Look again soon while a namespace mapping is pending, after a refused apply, and now
        and then while a konnector conflict stands."""
        self.pending = pending
        if pending:
            self._enqueue_after((Work.SYNC, self.name), 0.5)
        elif retry:
            self._enqueue_after((Work.SYNC, self.name), APPLY_RETRY_SECONDS)
        elif self.conflicts:
            self._enqueue_after((Work.SYNC, self.name), KONNECTOR_RECHECK_SECONDS)

    def _load_desired(self, head: str, raw_exports: list[dict[str, Any]]) -> DesiredState:
        """Git's desired state, loaded again only when the commit or an export changed, and then
        only the files the commit changed (``changes.IncrementalLoader``)."""
        exports = exports_version(raw_exports)
        key = (head, exports)
        if self._desired is None or self._desired[0] != key:
            desired = self._loader.load(
                self.reader,
                head,
                self.spec.path,
                self.view.exports,
                frozenset(self.spec.app_namespaces),
                exports,
            )
            self._desired = (key, desired)
        return self._desired[1]

    # -- write-back -------------------------------------------------------------------------

    def _schedule_write_back(
        self,
        desired: DesiredState,
        statuses: tuple[ObservedStatus, ...],
        problems: list[Found],
    ) -> None:
        metrics.CLAIMS.labels(self.name).set(len(desired.claims))
        metrics.REJECTED.labels(self.name).set(documents(desired.rejections))
        source = self.schedule.source(self.head, self.reader)
        if self.schedule.plan(desired, statuses, problems, source):
            self._enqueue_after((Work.WRITEBACK, self.name), self.batch_window)

    def write_back(self) -> str | None:
        """Commit what the last pass observed when it changed; note its source commit."""
        sha = self.schedule.commit(self.writer, self.reader, self.spec.path, self.bot)
        if sha:
            self.last_status_commit = sha
            log.info("status committed", extra={"repository": self.name, "commit": sha})
        return sha


def exports_version(raw_exports: list[dict[str, Any]]) -> tuple[str, ...]:
    """Changes whenever an export does: their resourceVersions."""
    return tuple(sorted(e["metadata"]["resourceVersion"] for e in raw_exports))
