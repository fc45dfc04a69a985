"""The reconciler process's lifecycle: the registrations' workers (``registrations.py``), the
webhooks (``triggers/dispatch.py``), the namespace controller, binder token renewal, HTTP, and
the leader election and shards that decide which of them run here.

Registrations come from the config file and from RepositoryBindings on the Control Plane. Every
trigger — a webhook, a changed ``ls-remote``, a file-system event on a ``file://`` remote, an
informer event — only enqueues work; workers run it, serialised per repository. Registrations
(clones, informers) have a pool of ``REGISTRATION_WORKERS`` of their own beside the ``workers``
that run passes and write-backs, so many arriving at once (a hand-over) neither wait on four
workers nor hold up the passes of repositories already registered.

With ``leaderElection`` on, replicas share a Lease: only the leader runs any of that, while the
HTTP server runs on every replica and a standby's /readyz answers 503. A leader that loses the
Lease exits non-zero at once (client-go's default), and Kubernetes restarts it as a standby.

With ``leaderElection.shards`` too, every replica reconciles: a repository is worked on only by
the replica holding its shard's Lease (``shards.py``), and the leader keeps the cluster-wide
controllers (namespaces, the platform repository, binder token renewal). Every replica is Ready,
answers webhooks and reads every registration: a push for another replica's shard stamps that
shard's Lease, a pull request is planned where it arrives. A replica taking a shard registers
and passes first the repositories with a push not passed yet (``ha/handover.py``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import uvicorn

from klutch_gitops.config import Config
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError, api_client
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.workqueue import WorkQueue, run_workers
from klutch_gitops.models.registration import registration_name
from klutch_gitops.policies import install_policies, load_policies
from reconciler import metrics
from reconciler.controllers.export_requests import ExportRequestController
from reconciler.controllers.namespaces import NamespaceController
from reconciler.controllers.tokens import TokenRenewer
from reconciler.git.remote import ls_remote
from reconciler.ha.handover import TRIAGE_SECONDS, Lanes, TakeOver, clone_head, status_commits
from reconciler.ha.leader import LeaderElector, default_identity
from reconciler.ha.shards import ShardCoordinator
from reconciler.registrations import Registrations
from reconciler.server import create_app, serve
from reconciler.sync.connection import Connection, Resolver
from reconciler.sync.repository import Sync
from reconciler.triggers.dispatch import WebhookDispatch
from reconciler.work import Key, Work

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 30.0
STANDBY = "standby: not the leader"
# Registrations at once: each clones (or fetches) twice and lists its caches, mostly waiting on
# git and the API servers, whose clients keep their own rate limits.
REGISTRATION_WORKERS = 8


class Reconciler:
    def __init__(
        self,
        config: Config,
        identity: str | None = None,
        exit_process: Callable[[int], object] = os._exit,
    ) -> None:
        """``identity``: this replica's in the leader election (default: Pod or host, and pid);
        ``exit_process`` ends the process when the leadership is lost."""
        self.config = config
        self.exit_process = exit_process
        self.admin = Kube(api_client(config.control_plane_kubeconfig))
        self.resolver = Resolver(self.admin, config.work_dir / ".secrets")
        self.queue: WorkQueue[Key] = WorkQueue(observer=metrics.QueueMetrics("reconcile"))
        self.lanes = Lanes(self.queue, WorkQueue(observer=metrics.QueueMetrics("register")))
        self.registrations = Registrations(
            config, self.admin, self.resolver, self.lanes, self._owned
        )
        self.namespaces = NamespaceController(self.admin)
        self.export_requests = ExportRequestController(self.admin)
        identity = identity or default_identity()
        self.shards = self._shard_coordinator(identity)
        self.take_over = TakeOver(self.lanes, self._remote_head, self._passed)
        self.elector = (
            LeaderElector(
                self.admin, config.leader_election, identity, self._lead, self._lost_leadership
            )
            if config.leader_election.enabled
            else None
        )
        # The leader renews binder tokens; the registrations restart when a binder Secret changes.
        self.tokens = TokenRenewer(self.admin, config.binder_tokens)
        self.dispatch = WebhookDispatch(
            self.registrations, self.resolver, self.shards, config.work_dir
        )
        self.server: uvicorn.Server | None = None
        self.workers: list[threading.Thread] = []
        self.work_lock = threading.Lock()
        self.leading = False  # runs the cluster-wide controllers
        self.reconciling = False  # runs workers and registrations
        self.stopped = False

    def _shard_coordinator(self, identity: str) -> ShardCoordinator | None:
        election = self.config.leader_election
        if not (election.enabled and election.shards):
            return None
        return ShardCoordinator(
            self.admin,
            election,
            identity,
            self._shard_acquired,
            self._shard_releasing,
            self._shard_fetch,
            self._lost_leadership,
            self._record,
        )

    @property
    def syncs(self) -> dict[str, Sync]:
        """The syncs of the registrations this replica works on, by name."""
        records = list(self.registrations.records.values())
        return {r.name: r.sync for r in records if r.sync is not None}

    @property
    def errors(self) -> dict[str, str]:
        """Registrations whose last pass or registration failed, with the error."""
        records = list(self.registrations.records.values())
        return {r.name: r.error for r in records if r.error is not None}

    @property
    def visitors(self) -> dict[str, Connection]:
        """Other replicas' registrations, resolved for a pull request's webhook."""
        return self.dispatch.visitors

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, serve_http: bool = True) -> Reconciler:
        """Serve HTTP, and reconcile now or, with leader election, once this replica leads; with
        shards, reconcile the repositories of the shards it holds from the start."""
        if serve_http:
            self.server = serve(
                create_app(
                    self.waiting,
                    self.dispatch.webhook_candidates,
                    self.dispatch.on_push,
                    self.dispatch.on_pull_request,
                    self._metrics_token(),
                    self.registrations.shown,
                ),
                self.config.listen,
            )
        if self.shards is not None:
            self._start_work(cluster_wide=False)
            self.shards.start()
        if self.elector is not None:
            self.elector.start()
        else:
            self._start_work()
        return self

    def _metrics_token(self) -> bytes | None:
        """The token that unlocks names on /readyz and /metrics; a reference that cannot be
        read, or an empty token, stops the start."""
        ref = self.config.metrics_token
        if ref is None:
            return None
        token = self.resolver.value(ref, "metricsToken", "").strip()
        if not token:
            raise KlutchError(
                "metricsToken is empty", "put a long random token into the referenced value"
            )
        return token

    def _start_work(self, cluster_wide: bool = True) -> None:
        """The repositories' work unless it runs already, and the cluster-wide controllers."""
        with self.work_lock:
            if self.stopped:
                return
            install_crds(self.admin.api, load_crds(cluster="control-plane"))
            install_policies(self.admin.api, load_policies())
            if not self.reconciling:
                self.reconciling = True  # from here on, stop() has something to stop
                self.registrations.start()
                self.workers = [
                    *run_workers(self.queue, self._handle, self.config.workers, "reconcile"),
                    *run_workers(
                        self.lanes.registering, self._register, REGISTRATION_WORKERS, "register"
                    ),
                ]
                self.dispatch.reviewer.start()
            if cluster_wide and not self.leading:
                self.leading = True
                self.namespaces.start()
                self.export_requests.start()
                self.tokens.start()
                if self.config.platform is not None:
                    self.registrations.start_platform(self.config.platform)

    def _lead(self) -> None:
        try:
            self._start_work()
        except Exception:
            log.exception("could not start reconciling as the leader")
            self._lost_leadership()

    def _lost_leadership(self) -> None:
        """Another replica may lead already, or hold our shards, so exit at once without a
        graceful stop, as client-go does; Kubernetes restarts the container, which comes back
        as a standby (or a replica holding no shard yet)."""
        log.error("exiting: this reconciler lost its Lease")
        self.exit_process(1)

    def stop(self) -> None:
        """Stop the work, then release the Leases so other replicas take over at once."""
        if self.server is not None:
            self.server.should_exit = True
        with self.work_lock:
            self.stopped = True
            self._stop_work()
        self.take_over.stop()
        if self.shards is not None:
            self.shards.stop()
        if self.elector is not None:
            self.elector.stop()

    def _stop_work(self) -> None:
        if self.leading:
            self.namespaces.stop()
            self.export_requests.stop()
            self.tokens.stop()
            self.leading = False
        if not self.reconciling:
            return
        self.registrations.stop_watching()
        self.dispatch.reviewer.stop()
        self.lanes.shutdown()
        for worker in self.workers:  # let a pass or a push in flight finish
            worker.join(timeout=STOP_GRACE_SECONDS)
        self.registrations.stop_syncs()
        self.reconciling = False

    def waiting(self) -> list[str]:
        """What keeps the reconciler from serving (empty when it can): a standby, or the
        RepositoryBindings not listed yet; tenants' health is in their conditions instead."""
        if self.shards is None and self.elector is not None and not self.elector.leading.is_set():
            return [STANDBY]
        return self.registrations.waiting()

    def _register(self, key: Key) -> None:
        """A registration, after an urgent repository's first pass (``Lanes.hold``)."""
        self.lanes.hold(key[1])
        self.registrations.handle(key)

    def _handle(self, key: Key) -> None:
        """A pass or write-back; a repository's first pass here ends its place in front."""
        try:
            self.registrations.handle(key)
        finally:
            if key[0] == Work.SYNC and self.registrations.sync_of(key[1]) is not None:
                self.lanes.passed(key[1])

    def _owned(self, name: str) -> bool:
        """Whether this replica works on registration ``name`` (always, without shards)."""
        return self.shards is None or self.shards.owns(name)

    # -- shards -----------------------------------------------------------------------------

    def _in_shard(self, names: list[str], shard: int) -> list[str]:
        assert self.shards is not None
        return [name for name in names if self.shards.shard(name) == shard]

    def _shard_acquired(self, shard: int) -> None:
        assert self.shards is not None
        records = list(self.registrations.records.values())
        names = self._in_shard([r.name for r in records if r.spec is not None], shard)
        self.take_over.start(names, self.shards.recorded(shard), self.shards.unseen(shard))

    def _record(self, shard: int) -> dict[str, str]:
        """The commit each of the shard's repositories last passed here, for its Lease."""
        syncs = self.syncs  # built from the records: once, not per name
        return {
            name: outcome.commit
            for name in self._in_shard(list(syncs), shard)
            if (outcome := syncs[name].last_pass) is not None
        }

    def _remote_head(self, name: str) -> str | None:
        """The head of a registration's branch, asked with its own credentials."""
        spec = self.registrations.spec_of(name)
        if spec is None:  # gone meanwhile: nothing pending
            return None
        what = f"repository {name}"
        credentials = self.resolver.credentials(spec.credentials, what, spec.consumer_namespace)
        return ls_remote(spec.url, spec.branch, credentials, timeout=TRIAGE_SECONDS)

    def _passed(self, name: str) -> set[str]:
        """Commits known as passed besides the Lease's record: the RepositoryBinding's status
        and the clone an earlier run of this replica left (a persistent work directory)."""
        spec = self.registrations.spec_of(name)
        if spec is None:
            return set()
        passed = {
            commit
            for binding in self.registrations.bindings.items()
            if registration_name(binding["metadata"]) == name
            for commit in status_commits(binding.get("status"))
        }
        head = clone_head(self.config.work_dir, name, spec.url, spec.branch)
        return passed | ({head} if head else set())

    def _shard_releasing(self, shard: int) -> None:
        """Stop the shard's repositories, each after its pass or push in flight, so the next
        holder never works beside us."""
        registrations = self.registrations
        records = list(registrations.records.values())
        running = [r.name for r in records if r.spec is not None or r.sync is not None]
        for name in self._in_shard(running, shard):
            registrations.release(name)  # one may be in flight

    def _shard_fetch(self, shard: int) -> None:
        syncs = self.syncs
        for name in self._in_shard(list(syncs), shard):
            syncs[name].trigger_fetch()

    # -- one-shot ---------------------------------------------------------------------------

    def run_once(self, timeout: float = 60.0) -> list[str]:
        """Sync every registration until it settles, write status back once; return failures."""
        install_crds(self.admin.api, load_crds(cluster="control-plane"))
        install_policies(self.admin.api, load_policies())
        self.namespaces.start()
        failures = []
        for spec in self.config.repositories:
            try:
                sync = Sync(
                    self.resolver.connection(spec),
                    self.config.work_dir,
                    self.config.bot,
                    0.0,
                    lambda _key: None,
                    lambda _key, _delay: None,
                )
                deadline = time.monotonic() + timeout
                sync.sync()
                while not sync.settled() and time.monotonic() < deadline:
                    time.sleep(0.5)
                    sync.sync()
                if sync.settled():
                    sync.write_back()
                else:
                    failures.append(
                        f"{spec.name}: did not settle within {timeout:.0f}s "
                        "(namespace mapping or caches still pending)"
                    )
                sync.stop()
            except (KlutchError, KubeError) as error:
                failures.append(f"{spec.name}: {error}")
        self.namespaces.stop()
        return failures
