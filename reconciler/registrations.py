"""The set of registrations a reconciler works on, and their work items.

Registrations come from the config file, the platform repository (under ``PLATFORM``) and
RepositoryBindings watched on the Control Plane; a RepositoryBinding whose spec is refused is
reported, not followed. Each registration's sources are polled (or watched, for a ``file://``
remote), a changed binder Secret restarts the registrations that resolved it, a new reconcile
request (``steering.py``) fetches and passes at once, and after every pass, write-back and
registration the registration's status says what happened (``reporting.py``, ``status.py``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from klutch_gitops.apis import BINDER_KUBECONFIG_LABEL, REPOSITORY_BINDINGS
from klutch_gitops.config import Config, PlatformSpec, RegistrationSpec
from klutch_gitops.errors import KlutchError
from klutch_gitops.git.remote import ls_remote
from klutch_gitops.kube import conditions
from klutch_gitops.kube.client import SECRETS, Kube, KubeError
from klutch_gitops.kube.informer import Informer
from klutch_gitops.kube.workqueue import KeyQueue
from klutch_gitops.models.registration import registration_name
from klutch_gitops.repository_config import from_repository_binding
from reconciler import metrics
from reconciler.controllers.tokens import KEY as KUBECONFIG_KEY
from reconciler.reporting import Reporter, log_pass
from reconciler.status import StatusWriter, invalid_spec_status
from reconciler.steering import requested_at
from reconciler.sync.binding import Resolver
from reconciler.sync.platform import PlatformSync
from reconciler.sync.repository import Key, RepositorySync
from reconciler.triggers.sources import FileWatcher, Poller

log = logging.getLogger(__name__)

# The platform repository's registration key and its clone's directory under workDir. Neither can
# be a repository's: names match REGISTRATION_NAME_PATTERN, which has no ':' and no leading '.'.
PLATFORM = ":platform"
PLATFORM_DIR = ".platform"
WATCHED_POLL_ROUNDS = 10  # a file:// remote is watched: poll it every tenth interval only
# A registration's own pollInterval is a tenant's to set (RepositoryBinding): no shorter than
# this, so one tenant cannot keep the one poller thread spawning `git ls-remote` for itself.
MIN_POLL_INTERVAL = 1.0


class Registrations:
    """``owned(name)``: whether this replica works on a registration (shards)."""

    def __init__(
        self,
        config: Config,
        admin: Kube,
        resolver: Resolver,
        queue: KeyQueue[Key],
        owned: Callable[[str], bool],
    ) -> None:
        self.config = config
        self.admin = admin
        self.resolver = resolver
        self.queue = queue
        self.owned = owned
        self.specs: dict[str, RegistrationSpec] = {}
        self.syncs: dict[str, RepositorySync] = {}
        self.errors: dict[str, str] = {}
        self.reference_errors: dict[str, str] = {}  # a Secret or file that could not be used
        self.generations: dict[str, int] = {}  # registration -> its RepositoryBinding's, newest
        self.followed: dict[str, int | None] = {}  # registration -> the generation its sync runs
        self.binder_kubeconfigs: dict[tuple[str, str], str | None] = {}  # as last seen
        self.requested: dict[str, str | None] = {}  # registration -> its newest reconcile request
        self.locks: dict[str, threading.Lock] = {}
        self.platform: PlatformSync | None = None
        self.platform_webhook_secrets: tuple[bytes, ...] = ()
        self.poller: Poller[str] = Poller(config.poll_interval, self.ls_remote, self.source_changed)
        self.watcher: FileWatcher[str] = FileWatcher(self.source_changed)
        self.bindings = Informer(
            admin, REPOSITORY_BINDINGS, self.on_binding, name="repositorybindings"
        )
        # Every replica that reconciles (the only one, the leader, or each shard holder)
        # restarts the registrations it holds when a binder Secret changes, whoever changed it:
        # the renewer, possibly in another replica, or a new bind.
        self.binder_secrets = Informer(
            admin,
            SECRETS,
            self.on_binder_secret,
            label_selector=BINDER_KUBECONFIG_LABEL,
            name="binder-secrets",
        )
        self.status = StatusWriter(admin, self.bindings.get)
        self.reporter = Reporter(self.status)

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """The config file's registrations, the watches and the sources."""
        for spec in self.config.repositories:
            self.specs[spec.name] = spec
            self.queue.add(("register", spec.name))
        self.bindings.start()
        self.binder_secrets.start()
        self.poller.start()
        self.watcher.start()

    def stop_watching(self) -> None:
        self.poller.stop()
        self.watcher.stop()
        self.bindings.stop()
        self.binder_secrets.stop()

    def stop_syncs(self) -> None:
        for sync in self.syncs.values():
            sync.stop()

    def start_platform(self, spec: PlatformSpec) -> None:
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
        self.watch_source(PLATFORM, spec.url, spec.branch)
        self.queue.add(("platform", PLATFORM))

    def waiting(self) -> list[str]:
        """What keeps this replica from serving: only its own state, never a tenant's health
        (a broken Secret or an unreachable remote is in that registration's conditions and
        metrics), so one tenant cannot take the webhooks of all the others out of the Service."""
        if not self.bindings.synced.is_set():
            return ["RepositoryBindings not listed yet"]
        return []

    # -- work -------------------------------------------------------------------------------

    def lock(self, name: str) -> threading.Lock:
        return self.locks.setdefault(name, threading.Lock())

    def handle(self, key: Key) -> None:
        """One work item. A repository's items run one at a time: a restart (a new binding spec
        or a renewed token) replaces the checkouts that its pass and write-back use."""
        with self.lock(key[1]):
            self._handle(key)

    def _handle(self, key: Key) -> None:
        kind, name = key
        try:
            if kind == "platform" and self.platform is not None:
                result = self.platform.sync()
                metrics.ERRORS.labels(PLATFORM, "rejected").inc(len(result.rejections))
            elif kind == "register":
                self.register(name)
            elif kind == "sync" and name in self.syncs:
                self.sync(name)
            elif kind == "writeback" and name in self.syncs:
                self.write_back(name)
        except (KlutchError, KubeError) as error:
            metrics.failed(name, kind, type(error).__name__)
            self.failed(kind, name, str(error))
            raise
        except Exception as error:
            metrics.failed(name, kind, "internal")
            self.failed(kind, name, repr(error))
            raise

    def failed(self, kind: str, name: str, error: str) -> None:
        """A failed write-back is its condition's (WrittenBack); any other failure the pass's."""
        if kind == "writeback":
            log.warning("write-back failed", extra={"repository": name, "error": error})
            self.reporter.write_back_errors[name] = error  # the queue retries it
            self.report(name, self.errors.get(name))
        else:
            self.synced(name, error)

    def sync(self, name: str) -> None:
        """One pass, answering the newest reconcile request, and its summary line."""
        sync, asked, started = self.syncs[name], self.requested.get(name), time.monotonic()
        failure: str | None = None
        try:
            with metrics.RECONCILE_SECONDS.labels(name).time():
                sync.sync()
        except Exception as error:
            failure = str(error)
            raise
        finally:
            log_pass(name, sync, time.monotonic() - started, failure)
            if asked is not None:  # answered whatever the outcome, as Flux's controllers do:
                self.reporter.handled[name] = asked  # the waiting CLI then shows why it failed
        metrics.pass_succeeded(name)
        self.synced(name, None)

    def write_back(self, name: str) -> None:
        """A status commit; its failure is the WrittenBack condition's, retried by the queue."""
        with metrics.WRITE_BACK_SECONDS.labels(name).time():
            if self.syncs[name].write_back():
                metrics.COMMITS.labels(name).inc()
        self.reporter.write_back_errors.pop(name, None)
        self.report(name, self.errors.get(name))  # lastStatusCommit, WrittenBack

    def register(self, name: str) -> None:
        """(Re)start a registration's sync from its spec, or stop it when it went away."""
        spec = self.specs.get(name)
        old = self.syncs.pop(name, None)
        if old is not None:
            old.stop()
        self.reporter.konnector_warnings.pop(name, None)  # a new start tells a conflict again
        if spec is None or spec.suspend or not self.owned(name):
            self.unwatch(name)
            self.errors.pop(name, None)
            if spec is None or not self.owned(name):
                self.reporter.forget(name)  # gone, or another replica's to report
            elif spec.suspend and self.owned(name):
                self.report(name, None)  # Suspended, and how to resume
            return
        self.followed[name] = self.generations.get(name)
        try:
            binding = self.resolver.binding(spec)
        except KlutchError as error:
            self.reference_errors[name] = error.message
            raise
        self.reference_errors.pop(name, None)
        self.syncs[name] = RepositorySync(
            binding,
            self.config.work_dir,
            self.config.bot,
            self.config.batch_window,
            self.queue.add,
            self.queue.add_after,
        )
        self.watch_source(name, spec.url, spec.branch, spec.poll_interval)
        self.queue.add(("sync", name))

    def release(self, name: str) -> None:
        """Stop a registration another replica takes over, after its pass or push in flight."""
        with self.lock(name):
            sync = self.syncs.pop(name, None)
            if sync is not None:
                sync.stop()
            self.unwatch(name)
            self.errors.pop(name, None)
            self.reporter.forget(name)  # the next holder reports it

    def synced(self, name: str, error: str | None) -> None:
        if error is None:
            self.errors.pop(name, None)
        else:
            self.errors[name] = error
            log.warning("sync failed", extra={"repository": name, "error": error})
        self.report(name, error)

    # -- RepositoryBinding status -----------------------------------------------------------

    def report(self, name: str, error: str | None) -> None:
        """Tell a registration's status what its last pass did; nothing new, nothing written."""
        spec = self.specs.get(name)
        if spec is None:
            return
        self.reporter.report(
            spec,
            self.syncs.get(name),
            generation=self.followed.get(name, self.generations.get(name)),
            latest_generation=self.generations.get(name),
            error=error,
            reference_error=self.reference_errors.get(name),
        )

    def report_refused(self, obj: dict, error: KlutchError) -> None:
        """A RepositoryBinding the reconciler will not follow (say, a file:// one stored before
        the CRD refused it) says why in its status; written once per reason, so our own
        status update, which comes back as an event, does not write again."""
        meta = obj["metadata"]
        generation = meta.get("generation")
        self.status.write(
            meta["namespace"],
            meta["name"],
            lambda old: invalid_spec_status(str(error), generation, old, conditions.now()),
        )

    # -- triggers ---------------------------------------------------------------------------

    def on_binding(self, event: str, obj: dict) -> None:
        meta = obj["metadata"]
        name = registration_name(meta)
        if event == "DELETED":
            self.specs.pop(name, None)
            self.generations.pop(name, None)
            self.followed.pop(name, None)
            self.requested.pop(name, None)
            self.status.forget(meta["namespace"], meta["name"])
            self.queue.add(("register", name))
            return
        generation = meta.get("generation")
        try:
            spec = from_repository_binding(obj)
        except KlutchError as error:
            self.errors[name] = str(error)
            self.report_refused(obj, error)
            if self.specs.pop(name, None) is not None:
                self.queue.add(("register", name))  # stop what its former spec started
            return
        asked, self.requested[name] = self.requested.get(name), requested_at(obj)
        handled = (obj.get("status") or {}).get("lastHandledReconcileAt")
        if handled is not None:  # kept across restarts until a pass answers anew
            self.reporter.handled.setdefault(name, handled)
        if self.specs.get(name) == spec and name in self.syncs:
            if asked != self.requested[name] and self.requested[name] is not None:
                self.syncs[name].trigger_fetch()  # reconcile now: fetch and pass
            if generation is not None and generation != self.followed.get(name):
                self.generations[name] = self.followed[name] = generation  # the same spec
                self.queue.add(("sync", name))  # a pass reports the generation observed
            return  # a status update of ours, or a no-op edit
        self.specs[name] = spec
        if generation is not None:
            self.generations[name] = generation
        self.queue.add(("register", name))

    def binder_renewed(self, namespace: str, name: str) -> None:
        """A binder Secret got a new token: restart the registrations that resolved the old one."""
        for spec in list(self.specs.values()):
            ref = spec.control_plane_kubeconfig
            if ref.name == name and (ref.namespace or spec.consumer_namespace) == namespace:
                self.queue.add(("register", spec.name))

    def on_binder_secret(self, event: str, obj: dict) -> None:
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
            self.binder_renewed(*key)

    # -- sources ----------------------------------------------------------------------------

    def watch_source(self, name: str, url: str, branch: str, interval: float | None = None) -> None:
        """Poll at the registration's own ``pollInterval`` (None: the config file's), at least
        ``MIN_POLL_INTERVAL``; a new spec comes through ``register``, so a changed interval takes
        effect with it."""
        if interval is not None:
            interval = max(interval, MIN_POLL_INTERVAL)
        if url.startswith("file://"):
            self.watcher.watch(name, Path(url.removeprefix("file://")))
            self.poller.watch(name, url, branch, interval, every=WATCHED_POLL_ROUNDS)  # safety net
        else:
            self.poller.watch(name, url, branch, interval)

    def unwatch(self, name: str) -> None:
        self.poller.unwatch(name)
        self.watcher.unwatch(name)

    def ls_remote(self, name: str, url: str, branch: str) -> str | None:
        """Poll with the registration's own credentials: another tenant's registration of the
        same URL never lends its token."""
        if name == PLATFORM:
            credentials = self.platform.checkout.credentials if self.platform else None
        else:
            sync = self.syncs.get(name)
            credentials = sync.binding.credentials if sync else None
        return ls_remote(url, branch, credentials)

    def source_changed(self, name: str) -> None:
        if name == PLATFORM and self.platform is not None:
            self.platform.needs_fetch = True
            self.queue.add(("platform", PLATFORM))
        elif name in self.syncs:
            self.syncs[name].trigger_fetch()
