"""The reconciler process: registrations, triggers, workers, the namespace controller, binder
token renewal, HTTP.

Registrations come from the config file and from RepositoryBindings on the Control Plane. Every
trigger — a webhook, a changed ``ls-remote``, a file-system event on a ``file://`` remote, an
informer event — only enqueues work; workers run it, serialised per repository.

With ``leaderElection`` on, replicas share a Lease: only the leader runs any of that, while the
HTTP server runs on every replica and a standby's /readyz answers 503. A leader that loses the
Lease exits non-zero at once (client-go's default), and Kubernetes restarts it as a standby.

With ``leaderElection.shards`` too, every replica reconciles: a repository is worked on only by
the replica holding its shard's Lease (``shards.py``), and the leader keeps the cluster-wide
controllers (namespaces, the platform repository, binder token renewal). Every replica is Ready,
answers webhooks and reads every registration: a push for another replica's shard stamps that
shard's Lease, a pull request is planned where it arrives.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

from klutch_gitops.apis import BINDER_KUBECONFIG_LABEL, REPOSITORY_BINDINGS
from klutch_gitops.config import Config, PlatformSpec, RepositorySpec
from klutch_gitops.errors import KlutchError
from klutch_gitops.git.remote import ls_remote
from klutch_gitops.kube.client import EVENTS, SECRETS, Kube, KubeError, api_client
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.informer import Informer
from klutch_gitops.kube.workqueue import WorkQueue, run_workers
from klutch_gitops.policies import install_policies, load_policies
from klutch_gitops.registrations import from_repository_binding
from klutch_gitops.urls import normalize_repo_url
from reconciler import metrics
from reconciler.controllers.export_requests import ExportRequestController
from reconciler.controllers.namespaces import NamespaceController
from reconciler.controllers.tokens import KEY as KUBECONFIG_KEY
from reconciler.controllers.tokens import TokenRenewer
from reconciler.ha.leader import LeaderElector, default_identity
from reconciler.ha.shards import ShardCoordinator
from reconciler.review.pulls import Reviewer
from reconciler.server import create_app, serve
from reconciler.sync.binding import Binding, Resolver
from reconciler.sync.platform import PlatformSync
from reconciler.sync.events import warning_event
from reconciler.sync.repository import Key, RepositorySync
from reconciler.triggers.sources import FileWatcher, Poller
from reconciler.triggers.webhook_events import PullRequestEvent, PushEvent

log = logging.getLogger(__name__)

# The platform repository's registration key and its clone's directory under workDir. Neither can
# be a repository's: names match REPOSITORY_NAME_PATTERN, which has no ':' and no leading '.'.
PLATFORM = ":platform"
PLATFORM_DIR = ".platform"
STOP_GRACE_SECONDS = 30.0
STANDBY = "standby: not the leader"
WATCHED_POLL_ROUNDS = 10  # a file:// remote is watched: poll it every tenth round only
VISITOR_SECRET_SECONDS = 60.0  # another replica's webhook secret is read again after this


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
        self.queue: WorkQueue[Key] = WorkQueue()
        self.specs: dict[str, RepositorySpec] = {}
        self.syncs: dict[str, RepositorySync] = {}
        self.errors: dict[str, str] = {}
        self.reference_errors: dict[str, str] = {}  # a Secret or file that could not be used
        self.visitors: dict[str, Binding] = {}  # other replicas' registrations, for webhooks
        # other replicas' webhook secrets: registration -> (spec, until, secrets)
        self.visitor_secrets: dict[str, tuple[RepositorySpec, float, tuple[bytes, ...]]] = {}
        self.binder_kubeconfigs: dict[tuple[str, str], str | None] = {}  # as last seen
        self.konnector_warnings: dict[str, str] = {}  # registration -> conflict last evented
        self.repository_locks: dict[str, threading.Lock] = {}
        self.namespaces = NamespaceController(self.admin)
        self.export_requests = ExportRequestController(self.admin)
        self.platform: PlatformSync | None = None
        self.platform_webhook_secrets: tuple[bytes, ...] = ()
        self.poller: Poller[str] = Poller(
            config.poll_interval, self._ls_remote, self._source_changed
        )
        self.watcher: FileWatcher[str] = FileWatcher(self._source_changed)
        self.bindings = Informer(
            self.admin, REPOSITORY_BINDINGS, self._on_binding, name="repositorybindings"
        )
        election = config.leader_election
        identity = identity or default_identity()
        self.shards = (
            ShardCoordinator(
                self.admin,
                election,
                identity,
                self._shard_acquired,
                self._shard_releasing,
                self._shard_fetch,
                self._lost_leadership,
            )
            if election.enabled and election.shards
            else None
        )
        # The leader renews binder tokens; every replica that reconciles (the only one, the
        # leader, or each shard holder) restarts the registrations it holds when a binder Secret
        # changes, whoever changed it: the renewer, possibly in another replica, or a new bind.
        self.tokens = TokenRenewer(self.admin, config.binder_tokens)
        self.binder_secrets = Informer(
            self.admin,
            SECRETS,
            self._on_binder_secret,
            label_selector=BINDER_KUBECONFIG_LABEL,
            name="binder-secrets",
        )
        self.reviewer = Reviewer(self._bindings, config.work_dir)
        self.server = None
        self.workers: list[threading.Thread] = []
        self.work_lock = threading.Lock()
        self.leading = False  # runs the cluster-wide controllers
        self.reconciling = False  # runs workers and registrations
        self.stopped = False
        self.elector = (
            LeaderElector(self.admin, election, identity, self._lead, self._lost_leadership)
            if election.enabled
            else None
        )

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, serve_http: bool = True) -> Reconciler:
        """Serve HTTP, and reconcile now or, with leader election, once this replica leads; with
        shards, reconcile the repositories of the shards it holds from the start."""
        if serve_http:
            self.server = serve(
                create_app(
                    self.waiting,
                    self.webhook_candidates,
                    self.on_push,
                    self.on_pull_request,
                    self._metrics_token(),
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
                for spec in self.config.repositories:
                    self.specs[spec.name] = spec
                    self.queue.add(("register", spec.name))
                self.bindings.start()
                self.binder_secrets.start()
                self.workers = run_workers(
                    self.queue, self.handle, self.config.workers, "reconcile"
                )
                self.reviewer.start()
                self.poller.start()
                self.watcher.start()
            if cluster_wide and not self.leading:
                self.leading = True
                self.namespaces.start()
                self.export_requests.start()
                self.tokens.start()
                if self.config.platform is not None:
                    self._start_platform(self.config.platform)

    def _start_platform(self, spec: PlatformSpec) -> None:
        """Register the platform repository like a repository, under a key no repository can
        have: polled and fetched on a verified push with its own credentials and secret."""
        self.platform = PlatformSync(
            spec,
            self.admin,
            self.config.work_dir / PLATFORM_DIR,
            self.resolver.credentials(spec.credentials, "platform", ""),
        )
        if spec.webhook_secret is not None:
            self.platform_webhook_secrets = (
                self.resolver.value(spec.webhook_secret, "platform.webhookSecret", ""),
            )
        self._watch_source(PLATFORM, spec.url, spec.branch)
        self.queue.add(("platform", PLATFORM))

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
        self.poller.stop()
        self.watcher.stop()
        self.bindings.stop()
        self.binder_secrets.stop()
        self.reviewer.stop()
        self.queue.shutdown()
        for worker in self.workers:  # let a pass or a push in flight finish
            worker.join(timeout=STOP_GRACE_SECONDS)
        for sync in self.syncs.values():
            sync.stop()
        self.reconciling = False

    def waiting(self) -> list[str]:
        """What keeps the reconciler from being ready (empty when ready)."""
        if self.shards is None and self.elector is not None and not self.elector.leading.is_set():
            return [STANDBY]
        waiting = [
            f"repository {name}: {error}"
            for name, error in list(self.errors.items())
            if self._owned(name)
        ]
        for name, spec in list(self.specs.items()):
            sync = self.syncs.get(name)
            if not self._owned(name) or name in self.errors or spec.suspend:
                continue
            if sync is None or sync.head is None:
                waiting.append(f"repository {name}: not synced yet")
        if not self.bindings.synced.is_set():
            waiting.append("RepositoryBindings not listed yet")
        return waiting

    # -- work -------------------------------------------------------------------------------

    def handle(self, key: Key) -> None:
        """One work item. A repository's items run one at a time: a restart (a new binding spec
        or a renewed token) replaces the checkouts that its pass and write-back use."""
        with self.repository_locks.setdefault(key[1], threading.Lock()):
            self._handle(key)

    def _handle(self, key: Key) -> None:
        kind, name = key
        metrics.QUEUE_DEPTH.set(len(self.queue))
        try:
            if kind == "platform" and self.platform is not None:
                result = self.platform.sync()
                metrics.ERRORS.labels(PLATFORM, "rejected").inc(len(result.rejections))
            elif kind == "register":
                self._register(name)
            elif kind == "sync" and name in self.syncs:
                with metrics.RECONCILE_SECONDS.labels(name).time():
                    self.syncs[name].sync()
                self._synced(name, None)
            elif kind == "writeback" and name in self.syncs:
                with metrics.WRITE_BACK_SECONDS.labels(name).time():
                    if self.syncs[name].write_back():
                        metrics.COMMITS.labels(name).inc()
        except (KlutchError, KubeError) as error:
            metrics.ERRORS.labels(name, type(error).__name__).inc()
            self._synced(name, str(error))
            raise
        except Exception as error:
            metrics.ERRORS.labels(name, "internal").inc()
            self._synced(name, repr(error))
            raise

    def _owned(self, name: str) -> bool:
        """Whether this replica works on registration ``name`` (always, without shards)."""
        return self.shards is None or self.shards.owns(name)

    def _register(self, name: str) -> None:
        spec = self.specs.get(name)
        old = self.syncs.pop(name, None)
        if old is not None:
            old.stop()
        self.konnector_warnings.pop(name, None)  # a new start tells a standing conflict again
        if spec is None or spec.suspend or not self._owned(name):
            self.poller.unwatch(name)
            self.watcher.unwatch(name)
            self.errors.pop(name, None)
            return
        try:
            binding = self.resolver.binding(spec)
        except KlutchError as error:
            self.reference_errors[name] = error.message
            raise
        self.reference_errors.pop(name, None)
        self.visitors.pop(name, None)
        self.syncs[name] = RepositorySync(
            binding,
            self.config.work_dir,
            self.config.bot,
            self.config.batch_window,
            self.queue.add,
            self.queue.add_after,
        )
        self._watch_source(name, spec.url, spec.branch)
        self.queue.add(("sync", name))

    def _watch_source(self, name: str, url: str, branch: str) -> None:
        if url.startswith("file://"):
            self.watcher.watch(name, Path(url.removeprefix("file://")))
            self.poller.watch(name, url, branch, every=WATCHED_POLL_ROUNDS)  # a safety net
        else:
            self.poller.watch(name, url, branch)

    def _synced(self, name: str, error: str | None) -> None:
        if error is None:
            self.errors.pop(name, None)
        else:
            self.errors[name] = error
            log.warning("sync failed", extra={"repository": name, "error": error})
        spec = self.specs.get(name)
        sync = self.syncs.get(name)
        if spec is not None and spec.source.startswith("RepositoryBinding"):
            self._report_binding(spec, sync, error)

    def _report_binding(
        self, spec: RepositorySpec, sync: RepositorySync | None, error: str | None
    ) -> None:
        namespace, _, name = spec.source.removeprefix("RepositoryBinding ").partition("/")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        reference_error = self.reference_errors.get(spec.name)
        status: dict = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False" if error else "True",
                    "reason": "SyncFailed" if error else "Synced",
                    "message": (error or "synced")[:1000],
                    "lastTransitionTime": now,
                },
                {
                    "type": "SecretValid",
                    "status": "False" if reference_error else "True",
                    "reason": "SecretInvalid" if reference_error else "SecretsResolved",
                    "message": (reference_error or "every referenced Secret is usable")[:1000],
                    "lastTransitionTime": now,
                },
            ]
        }
        if sync is not None:
            status["conditions"].append(self._konnector_condition(spec, sync, now))
        if sync is not None and sync.head:
            status["lastFetchedCommit"] = sync.head
            if sync.last_status_commit:
                status["lastStatusCommit"] = sync.last_status_commit
        try:
            self.admin.apply(
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
                extra={"binding": spec.source, "error": str(failure)},
            )

    def _konnector_condition(self, spec: RepositorySpec, sync: RepositorySync, now: str) -> dict:
        """KonnectorConflict: a Klutch konnector serves one of the repository's kinds for another
        consumer namespace (``reconciler/sync/konnector.py``); a Warning Event when it starts or
        changes."""
        conflicts = sync.conflicts
        message = "; ".join(f"{v.message}. Fix: {v.fix}" for _, v in sorted(conflicts.items()))
        if not conflicts:
            self.konnector_warnings.pop(spec.name, None)
        elif self.konnector_warnings.get(spec.name) != message:
            self.konnector_warnings[spec.name] = message
            self._binding_event(spec, "ForeignKonnector", message)
        return {
            "type": "KonnectorConflict",
            "status": "True" if conflicts else "False",
            "reason": "ForeignKonnector" if conflicts else "NoForeignKonnector",
            "message": (
                message or "no Klutch konnector serves these kinds for another consumer namespace"
            )[:8000],  # one conflict per kind a konnector binds: room for a few
            "lastTransitionTime": now,
        }

    def _binding_event(self, spec: RepositorySpec, reason: str, message: str) -> None:
        """A Warning Event on the RepositoryBinding, where `kubectl describe` shows it."""
        namespace, _, name = spec.source.removeprefix("RepositoryBinding ").partition("/")
        live = self.bindings.get(namespace, name) or {"metadata": {}}
        meta = {"name": name, "namespace": namespace, "uid": live["metadata"].get("uid")}
        try:
            self.admin.create(
                EVENTS, warning_event(REPOSITORY_BINDINGS, {"metadata": meta}, reason, message)
            )
        except KubeError as error:
            log.warning(
                "could not record event", extra={"binding": spec.source, "error": str(error)}
            )

    # -- triggers ---------------------------------------------------------------------------

    def _on_binding(self, event: str, obj: dict) -> None:
        meta = obj["metadata"]
        name = f"{meta['namespace']}.{meta['name']}"[:63].rstrip("-.")
        if event == "DELETED":
            self.specs.pop(name, None)
        else:
            try:
                spec = from_repository_binding(obj)
            except KlutchError as error:
                self.errors[name] = str(error)
                self._report_refused(obj, error)
                if self.specs.pop(name, None) is not None:
                    self.queue.add(("register", name))  # stop what its former spec started
                return
            if self.specs.get(name) == spec and name in self.syncs:
                return  # a status update of ours, or a no-op edit
            self.specs[name] = spec
        self.queue.add(("register", name))

    def _report_refused(self, obj: dict, error: KlutchError) -> None:
        """A RepositoryBinding the reconciler will not follow (say, a file:// one stored before
        the CRD refused it) says why in its status; written once per reason, so our own
        status update, which comes back as an event, does not write again."""
        message = str(error)[:1000]
        conditions = ((obj.get("status") or {}).get("conditions")) or []
        ready = next((c for c in conditions if c.get("type") == "Ready"), {})
        if (ready.get("reason"), ready.get("message")) == ("InvalidSpec", message):
            return
        meta = obj["metadata"]
        condition = {
            "type": "Ready",
            "status": "False",
            "reason": "InvalidSpec",
            "message": message,
            "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        try:
            self.admin.apply(
                REPOSITORY_BINDINGS,
                {
                    "apiVersion": REPOSITORY_BINDINGS.api_version,
                    "kind": "RepositoryBinding",
                    "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                    "status": {"conditions": [condition]},
                },
                force=True,
                subresource="status",
            )
        except KubeError as failure:
            log.warning(
                "could not report RepositoryBinding status",
                extra={"binding": f"{meta['namespace']}/{meta['name']}", "error": str(failure)},
            )

    def _binder_renewed(self, namespace: str, name: str) -> None:
        """A binder Secret got a new token: restart the registrations that resolved the old one."""
        for spec in list(self.specs.values()):
            ref = spec.control_plane_kubeconfig
            if ref.name == name and (ref.namespace or spec.consumer_namespace) == namespace:
                self.queue.add(("register", spec.name))

    def _on_binder_secret(self, event: str, obj: dict) -> None:
        """Restart on a changed kubeconfig, whether it comes as an update or, after a broken
        watch, in a relist; the first sighting of a Secret only records it."""
        meta = obj["metadata"]
        key = (meta["namespace"], meta["name"])
        seen = self.binder_kubeconfigs.get(key)
        if event == "DELETED":
            self.binder_kubeconfigs.pop(key, None)
            return
        self.binder_kubeconfigs[key] = (obj.get("data") or {}).get(KUBECONFIG_KEY)
        if seen is not None and seen != self.binder_kubeconfigs[key]:
            self._binder_renewed(*key)

    def _ls_remote(self, name: str, url: str, branch: str) -> str | None:
        """Poll with the registration's own credentials: another tenant's registration of the
        same URL never lends its token."""
        if name == PLATFORM:
            credentials = self.platform.checkout.credentials if self.platform else None
        else:
            sync = self.syncs.get(name)
            credentials = sync.binding.credentials if sync else None
        return ls_remote(url, branch, credentials)

    def _source_changed(self, name: str) -> None:
        if name == PLATFORM and self.platform is not None:
            self.platform.needs_fetch = True
            self.queue.add(("platform", PLATFORM))
        elif name in self.syncs:
            self.syncs[name].trigger_fetch()

    def on_push(self, event: PushEvent) -> int:
        """A verified push: fetch the registrations whose own secret verified it and that follow
        its branch, or stamp the Lease of their shard for the replica that holds it."""
        triggered = 0
        platform = self.platform
        if PLATFORM in event.registrations and platform and platform.spec.branch == event.branch:
            self._source_changed(PLATFORM)
            triggered += 1
        for name in sorted(event.registrations - {PLATFORM}):
            spec = self.specs.get(name)
            if spec is None or spec.branch != event.branch:
                continue
            sync = self.syncs.get(name)
            if sync is not None:
                sync.trigger_fetch()
            elif self.shards is not None and not self.shards.owns(name):
                self.shards.request_fetch(self.shards.shard(name))
            else:
                continue  # suspended, or not registered (an error is reported for it)
            triggered += 1
        return triggered

    def on_pull_request(self, event: PullRequestEvent) -> int:
        self._visit(event.registrations)
        return self.reviewer.submit(event)

    def _bindings(self) -> dict[str, Binding]:
        """The registrations this replica works on, and those it resolved for a webhook that
        are still registered as they were."""
        visiting = {
            name: binding
            for name, binding in list(self.visitors.items())
            if self.specs.get(name) == binding.spec
        }
        return {**visiting, **{name: sync.binding for name, sync in list(self.syncs.items())}}

    def webhook_candidates(self, urls: frozenset[str]) -> list[tuple[str, bytes]]:
        """(registration, webhook secret) for every registration of ``urls`` that has one.

        Anyone may name any URL in a request that is not verified yet, so for another replica's
        registrations only the webhook secret is read (and kept for a while, failures too),
        never the whole binding with its kubeconfigs and credentials.
        """
        for stale in set(self.visitor_secrets) - set(self.specs):
            self.visitor_secrets.pop(stale, None)
        pairs = self._platform_candidates(urls)
        for name, spec in list(self.specs.items()):
            if spec.suspend or spec.webhook_secret is None:
                continue
            if normalize_repo_url(spec.url) not in urls:
                continue
            sync = self.syncs.get(name)
            if sync is not None:
                secrets = sync.binding.webhook_secrets
            elif self.shards is not None and not self.shards.owns(name):
                secrets = self._visitor_secrets(name, spec)
            else:
                continue  # not registered (an error is reported for it)
            pairs.extend((name, secret) for secret in secrets)
        return pairs

    def _platform_candidates(self, urls: frozenset[str]) -> list[tuple[str, bytes]]:
        """The platform repository's webhook secret when ``urls`` name it: on the leader only,
        which alone syncs it."""
        platform = self.platform
        if platform is None or normalize_repo_url(platform.spec.url) not in urls:
            return []
        return [(PLATFORM, secret) for secret in self.platform_webhook_secrets]

    def _visitor_secrets(self, name: str, spec: RepositorySpec) -> tuple[bytes, ...]:
        """The webhook secret of another replica's registration, read at most once a while."""
        now = time.monotonic()
        cached = self.visitor_secrets.get(name)
        if cached is not None and cached[0] == spec and cached[1] > now:
            return cached[2]
        assert spec.webhook_secret is not None
        try:
            secrets: tuple[bytes, ...] = (
                self.resolver.value(
                    spec.webhook_secret,
                    f"repository {name}: webhook secret",
                    spec.consumer_namespace,
                ),
            )
        except KlutchError as error:
            log.info(
                "webhook for a registration whose secret cannot be read",
                extra={"repository": name, "error": error.message},
            )
            secrets = ()
        self.visitor_secrets[name] = (spec, now + VISITOR_SECRET_SECONDS, secrets)
        return secrets

    def _visit(self, names: frozenset[str]) -> None:
        """With shards, resolve the registrations among ``names`` (those a request verified for)
        that another replica works on, so this one can plan their pull requests."""
        if self.shards is None:
            return
        for name in sorted(names):
            spec = self.specs.get(name)
            if spec is None or name in self.syncs or spec.suspend:
                continue
            visitor = self.visitors.get(name)
            if visitor is not None and visitor.spec == spec:
                continue
            try:
                self.visitors[name] = self.resolver.binding(spec)
            except KlutchError as error:
                log.info(
                    "webhook for a registration that cannot be resolved",
                    extra={"repository": name, "error": error.message},
                )

    # -- shards -----------------------------------------------------------------------------

    def _in_shard(self, names: list[str], shard: int) -> list[str]:
        assert self.shards is not None
        return [name for name in names if self.shards.shard(name) == shard]

    def _shard_acquired(self, shard: int) -> None:
        for name in self._in_shard(list(self.specs), shard):
            self.queue.add(("register", name))

    def _shard_releasing(self, shard: int) -> None:
        """Stop the shard's repositories, each after its pass or push in flight, so the next
        holder never works beside us."""
        for name in self._in_shard([*{*self.specs, *self.syncs}], shard):  # one may be in flight
            with self.repository_locks.setdefault(name, threading.Lock()):
                sync = self.syncs.pop(name, None)
                if sync is not None:
                    sync.stop()
                self.poller.unwatch(name)
                self.watcher.unwatch(name)
                self.errors.pop(name, None)

    def _shard_fetch(self, shard: int) -> None:
        for name in self._in_shard(list(self.syncs), shard):
            if (sync := self.syncs.get(name)) is not None:
                sync.trigger_fetch()

    # -- one-shot ---------------------------------------------------------------------------

    def run_once(self, timeout: float = 60.0) -> list[str]:
        """Sync every registration until it settles, write status back once; return failures."""
        install_crds(self.admin.api, load_crds(cluster="control-plane"))
        install_policies(self.admin.api, load_policies())
        self.namespaces.start()
        failures = []
        for spec in self.config.repositories:
            try:
                binding = self.resolver.binding(spec)
                sync = RepositorySync(
                    binding,
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
