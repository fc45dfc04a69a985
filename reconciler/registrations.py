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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from klutch_gitops.apis import BINDER_KUBECONFIG_LABEL, REPOSITORY_BINDINGS
from klutch_gitops.config import Config, PlatformSpec, RegistrationSpec
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.informer import Informer
from klutch_gitops.kube.resources import SECRETS
from klutch_gitops.kube.workqueue import KeyQueue
from klutch_gitops.models.registration import registration_name
from klutch_gitops.repository_config import from_repository_binding
from reconciler import metrics, reporting
from reconciler.controllers.tokens import KEY as KUBECONFIG_KEY
from reconciler.git.remote import ls_remote
from reconciler.registration import BindingRef, ConfigEntry, Origin, Registration
from reconciler.reporting import Reporter, log_pass
from reconciler.status import StatusWriter
from reconciler.steering import requested_at
from reconciler.sync.connection import Resolver
from reconciler.sync.platform import PlatformSync
from reconciler.sync.repository import Sync
from reconciler.triggers.sources import FileWatcher, Poller
from reconciler.work import Key, Work

log = logging.getLogger(__name__)

# The platform repository's registration key and its clone's directory under workDir. Neither can
# be a repository's: names match REPOSITORY_NAME_PATTERN, which has no ':' and no leading '.'.
PLATFORM = ":platform"
PLATFORM_DIR = ".platform"
WATCHED_POLL_ROUNDS = 10  # a file:// remote is watched: poll it every tenth interval only
# A registration's own pollInterval is a tenant's to set (RepositoryBinding): no shorter than
# this, so one tenant cannot keep the one poller thread spawning `git ls-remote` for itself.
MIN_POLL_INTERVAL = 1.0


class Registrations:
    """Every registration's record, by name; ``owned(name)``: whether this replica works on a
    registration (shards). A record is added (config file, RepositoryBinding) and dropped (by
    the ``register`` that stops a registration gone away) under ``_records_lock``, with the
    change of spec that decides, so a binding re-created meanwhile is never lost."""

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
        self.records: dict[str, Registration] = {}
        self._records_lock = threading.Lock()
        self.handlers: dict[Work, Callable[[str], None]] = {
            Work.REGISTER: self.register,
            Work.SYNC: self.run_pass,
            Work.WRITEBACK: self.write_back,
            Work.PLATFORM: self.sync_platform,
        }
        self.binder_kubeconfigs: dict[tuple[str, str], str | None] = {}  # as last seen
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
            with self._records_lock:
                self.records[spec.name] = Registration(spec.name, ConfigEntry(), spec)
            self.queue.add((Work.REGISTER, spec.name))
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
        for record in list(self.records.values()):
            if record.sync is not None:
                record.sync.stop()

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
        self.queue.add((Work.PLATFORM, PLATFORM))

    def waiting(self) -> list[str]:
        """What keeps this replica from serving: only its own state, never a tenant's health
        (a broken Secret or an unreachable remote is in that registration's conditions and
        metrics), so one tenant cannot take the webhooks of all the others out of the Service."""
        if not self.bindings.synced.is_set():
            return ["RepositoryBindings not listed yet"]
        return []

    # -- what is known ----------------------------------------------------------------------

    def spec_of(self, name: str) -> RegistrationSpec | None:
        return record.spec if (record := self.records.get(name)) is not None else None

    def sync_of(self, name: str) -> Sync | None:
        return record.sync if (record := self.records.get(name)) is not None else None

    def shown(self) -> list[dict[str, Any]]:
        """``GET /registrations``."""
        return reporting.shown(list(self.records.values()))

    def _record(self, name: str, origin: Origin) -> Registration:
        """The record of ``name``, from ``origin`` now, new if it has none; under the lock."""
        record = self.records.setdefault(name, Registration(name, origin))
        record.origin = origin
        return record

    def _drop(self, record: Registration) -> None:
        """Forget a registration that went away, unless a new spec came meanwhile."""
        with self._records_lock:
            if record.spec is None and self.records.get(record.name) is record:
                del self.records[record.name]

    # -- work -------------------------------------------------------------------------------

    @contextmanager
    def lock(self, name: str) -> Iterator[Registration | None]:
        """Hold registration ``name``'s lock, with its record (None: it has none). A record is
        dropped only under its lock, so the one held is the current one."""
        while (record := self.records.get(name)) is not None:
            with record.lock:
                if self.records.get(name) is record:
                    yield record
                    return
        yield None

    def handle(self, key: Key) -> None:
        """One work item, by its kind's handler. A registration's items run one at a time (the
        platform's one kind of item, the queue runs one at a time itself)."""
        kind, name = Work(key[0]), key[1]
        if kind is Work.PLATFORM:
            self._run(kind, name, None)
            return
        with self.lock(name) as record:
            if record is not None:
                self._run(kind, name, record)

    def _run(self, kind: Work, name: str, record: Registration | None) -> None:
        try:
            self.handlers[kind](name)
        except Exception as error:
            known = isinstance(error, KlutchError | KubeError)  # else: "internal", and its repr
            metrics.failed(name, kind, type(error).__name__ if known else "internal")
            self.failed(kind, name, record, str(error) if known else repr(error))
            raise

    def failed(self, kind: Work, name: str, record: Registration | None, error: str) -> None:
        """A failed write-back is its condition's (WrittenBack); any other failure the pass's."""
        if kind is Work.WRITEBACK and record is not None:
            log.warning("write-back failed", extra={"repository": name, "error": error})
            record.write_back_error = error  # the queue retries it
            self.report(record)
        elif record is not None:
            self.synced(record, error)  # logs it
        else:
            log.warning("sync failed", extra={"repository": name, "error": error})

    def sync_platform(self, _name: str) -> None:
        if self.platform is not None:
            result = self.platform.sync()
            metrics.ERRORS.labels(PLATFORM, "rejected").inc(len(result.rejections))

    def run_pass(self, name: str) -> None:
        """One pass, answering the newest reconcile request, and its summary line."""
        record = self.records[name]
        sync, asked, started = record.sync, record.requested, time.monotonic()
        if sync is None:
            return
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
                record.handled = asked  # the waiting CLI then shows why it failed
        metrics.pass_succeeded(name)
        self.synced(record, None)

    def write_back(self, name: str) -> None:
        """A status commit; its failure is the WrittenBack condition's, retried by the queue."""
        record = self.records[name]
        if record.sync is None:
            return
        with metrics.WRITE_BACK_SECONDS.labels(name).time():
            if record.sync.write_back():
                metrics.COMMITS.labels(name).inc()
        record.write_back_error = None
        self.report(record)  # lastStatusCommit, WrittenBack

    def register(self, name: str) -> None:
        """(Re)start a registration's sync from its spec, or stop it when it went away."""
        record = self.records[name]
        spec, old, record.sync = record.spec, record.sync, None
        if old is not None:
            old.stop()
        record.konnector_warning = None  # a new start tells a conflict again
        if spec is None or spec.suspend or not self.owned(name):
            self.unwatch(name)
            record.error = None
            if spec is not None and self.owned(name):
                self.report(record)  # Suspended, and how to resume
                return
            self.reporter.forget(record)  # gone, or another replica's to report
            if spec is None:
                self._drop(record)
            return
        record.followed = record.generation
        try:
            connection = self.resolver.connection(spec)
        except KlutchError as error:
            record.reference_error = error.message
            raise
        record.reference_error = None
        record.sync = Sync(
            connection,
            self.config.work_dir,
            self.config.bot,
            self.config.batch_window,
            self.queue.add,
            self.queue.add_after,
        )
        self.watch_source(name, spec.url, spec.branch, spec.poll_interval)
        self.queue.add((Work.SYNC, name))

    def release(self, name: str) -> None:
        """Stop a registration another replica takes over, after its pass or push in flight."""
        with self.lock(name) as record:
            if record is None:
                return
            sync, record.sync = record.sync, None
            if sync is not None:
                sync.stop()
            self.unwatch(name)
            record.error = None
            self.reporter.forget(record)  # the next holder reports it

    def synced(self, record: Registration, error: str | None) -> None:
        record.error = error
        if error is not None:
            log.warning("sync failed", extra={"repository": record.name, "error": error})
        self.report(record)

    # -- RepositoryBinding status -----------------------------------------------------------

    def report(self, record: Registration) -> None:
        """Tell a registration's status what its last pass did; nothing new, nothing written."""
        if record.spec is not None:
            self.reporter.report(record)

    # -- triggers ---------------------------------------------------------------------------

    def on_binding(self, event: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        name, origin = registration_name(meta), BindingRef(meta["namespace"], meta["name"])
        if event == "DELETED":
            with self._records_lock:
                if (record := self.records.get(name)) is not None:
                    record.went()
            self.status.forget(meta["namespace"], meta["name"])
            self.queue.add((Work.REGISTER, name))
            return
        try:
            spec = from_repository_binding(obj)
        except KlutchError as error:
            with self._records_lock:
                stop = self._record(name, origin).refuse(str(error))
            self.status.refused(meta["namespace"], meta["name"], meta.get("generation"), str(error))
            if stop:
                self.queue.add((Work.REGISTER, name))  # stop what its former spec started
            return
        handled = (obj.get("status") or {}).get("lastHandledReconcileAt")
        with self._records_lock:
            work = self._record(name, origin).follow(
                spec, meta.get("generation"), requested_at(obj), handled
            )
        if work is not None:
            self.queue.add((work, name))

    def binder_renewed(self, namespace: str, name: str) -> None:
        """A binder Secret got a new token: restart the registrations that resolved the old one."""
        for spec in [r.spec for r in list(self.records.values()) if r.spec is not None]:
            ref = spec.control_plane_kubeconfig
            if ref.name == name and (ref.namespace or spec.consumer_namespace) == namespace:
                self.queue.add((Work.REGISTER, spec.name))

    def on_binder_secret(self, event: str, obj: dict[str, Any]) -> None:
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
            sync = self.sync_of(name)
            credentials = sync.connection.credentials if sync else None
        return ls_remote(url, branch, credentials)

    def source_changed(self, name: str) -> None:
        if name == PLATFORM and self.platform is not None:
            self.platform.needs_fetch = True
            self.queue.add((Work.PLATFORM, PLATFORM))
        elif (sync := self.sync_of(name)) is not None:
            sync.trigger_fetch()
