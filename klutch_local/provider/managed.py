"""The lifecycle every managed resource shares, in the order of crossplane-runtime's reconciler.

A kind supplies an ``External`` (observe, create, update, delete against the server); this module
does the rest: the finalizer and the external-name annotation, the ProviderConfig's server, the
connection Secret (controlled by the managed resource, never taking over someone else's), the
Ready and Synced conditions with the reason and message of a failure, the deletion policy, and a
requeue every poll interval so drift on the server is repaired.

One reconciler serves one Resource, cluster-scoped or namespaced alike: objects are keyed by
namespace (empty for cluster-scoped) and name, and references resolve in the object's flavour.

Only changes a person makes (generation, annotations, deletion) trigger a reconcile from the
watch; the provider's own status writes do not, so a changing ``atProvider`` cannot loop.
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.informer import Informer
from klutch_gitops.kube.resources import SECRETS
from klutch_gitops.kube.workqueue import WorkQueue, run_workers
from klutch_local.provider.api import (
    CONNECTION_SECRET_TYPE,
    EXTERNAL_NAME,
    FIELD_MANAGER,
    FINALIZER,
    ReconcileError,
    allows,
    available,
    connection_secret_ref,
    controlled_by,
    controller_reference,
    creating,
    deleting,
    external_name,
    for_provider,
    identity,
    in_flavour_of,
    now,
    orphans,
    reconcile_error,
    reconcile_success,
    set_conditions,
)
from klutch_local.provider.server import Connector, Server

log = logging.getLogger(__name__)

Details = dict[str, str]  # connection details, published to writeConnectionSecretToRef
Key = tuple[str, str]  # namespace ("" when cluster-scoped) and name


@dataclass
class Observation:
    """What the server has for one managed resource."""

    exists: bool
    up_to_date: bool = True
    ready: bool = True  # False while the external resource is still being made
    at_provider: dict[str, Any] = field(default_factory=dict)
    connection: Details | None = None
    conflict: str = ""  # it exists, but this provider did not make it for this resource


class Context:
    """One reconcile of one managed resource: the object (kept current), its server, the API."""

    def __init__(self, kube: Kube, resource: Resource, mr: dict[str, Any]) -> None:
        self.kube = kube
        self.resource = resource
        self.mr = mr
        self._server: Server | None = None

    @property
    def server(self) -> Server:
        assert self._server is not None, "connect before acting on the server"
        return self._server

    def connect(self, connector: Connector) -> None:
        self._server = connector.connect(self.mr)

    def get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        """A referenced object of the provider: ``resource`` names the cluster-scoped kind; a
        namespaced resource finds its namespaced twin in its own namespace."""
        return self.kube.get(
            in_flavour_of(resource, self.mr), self.mr["metadata"].get("namespace"), name
        )

    def connection_secret(self) -> Details:
        """The published connection details; empty unless the Secret is this resource's own."""
        ref = connection_secret_ref(self.mr)
        secret = self.kube.get(SECRETS, *ref) if ref else None
        if secret is None or not controlled_by(secret, self.mr):
            return {}
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    def report(self, at_provider: dict[str, Any]) -> None:
        """Record progress before a long step (a dump, a restore): Ready=False, Creating."""
        self.write_status([creating()], at_provider)

    def write_status(
        self, conditions: list[dict[str, Any]], at_provider: dict[str, Any] | None = None
    ) -> None:
        """Server-side apply of the status, skipped when nothing changed."""
        old = self.mr.get("status") or {}
        status = dict(old)
        if at_provider:
            status["atProvider"] = at_provider
        elif at_provider is not None:  # nothing observed: apply would turn {} into an invalid null
            status.pop("atProvider", None)
        status["conditions"] = set_conditions(
            old.get("conditions") or [], conditions, self.mr["metadata"].get("generation", 0), now()
        )
        if status == old:
            return
        self.mr = self.kube.apply(
            self.resource,
            {
                "apiVersion": self.mr["apiVersion"],
                "kind": self.mr["kind"],
                "metadata": {
                    k: v for k, v in self.mr["metadata"].items() if k in ("name", "namespace")
                },
                "status": status,
            },
            field_manager=FIELD_MANAGER,
            force=True,
            subresource="status",
        )


def resolve(ctx: Context, field: str, resource: Resource) -> str:
    """``forProvider.<field>``, or the external name of the object ``<field>Ref`` names (resolved
    on every reconcile, so the spec is never rewritten)."""
    params = for_provider(ctx.mr)
    ref = (params.get(f"{field}Ref") or {}).get("name")
    if ref:
        target = ctx.get(resource, ref)
        if target is None:
            raise ReconcileError(
                f"spec.forProvider.{field}Ref names {resource.kind} {ref}, which does not exist"
            )
        return external_name(target)
    if params.get(field):
        return str(params[field])
    raise ReconcileError(f"set spec.forProvider.{field} or spec.forProvider.{field}Ref")


class External(Protocol):
    """A kind's operations on the server. ``create`` and ``update`` return connection details
    to publish (or None); ``delete`` is idempotent and leaves alone what is not its own."""

    def observe(self, ctx: Context) -> Observation: ...

    def create(self, ctx: Context) -> Details | None: ...

    def update(self, ctx: Context, observation: Observation) -> Details | None: ...

    def delete(self, ctx: Context) -> None: ...


def key_of(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def trigger(obj: dict[str, Any]) -> tuple[Any, ...]:
    """What a person changes: a watch event that leaves it alone is the provider's own write."""
    meta = obj["metadata"]
    annotations = json.dumps(meta.get("annotations") or {}, sort_keys=True)
    return meta.get("generation"), meta.get("deletionTimestamp"), annotations


class ManagedReconciler:
    """Watches one kind and reconciles each object with its External."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        external: External,
        connector: Connector,
        *,
        poll_interval: float,
        workers: int = 2,
        on_event: Callable[[str, dict[str, Any]], None] = lambda _event, _obj: None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.external = external
        self.connector = connector
        self.poll_interval = poll_interval
        self.workers = workers
        self.on_event = on_event
        self.queue: WorkQueue[Key] = WorkQueue()
        self.name = f"{resource.plural}.{resource.group}"
        self.informer = Informer(kube, resource, self._on_event, name=self.name)
        self._seen: dict[Key, tuple[Any, ...]] = {}

    def start(self) -> ManagedReconciler:
        self.informer.start()
        run_workers(self.queue, self.reconcile, self.workers, self.name)
        return self

    def stop(self) -> None:
        self.informer.stop()
        self.queue.shutdown()

    def _on_event(self, event: str, obj: dict[str, Any]) -> None:
        self.on_event(event, obj)
        key = key_of(obj)
        if event == "DELETED":
            self._seen.pop(key, None)
            return
        changed = trigger(obj)
        if self._seen.get(key) != changed:
            self._seen[key] = changed
            self.queue.add(key)

    def reconcile(self, key: Key) -> None:
        """One pass; raises (after reporting Synced=False) so the queue retries with back-off."""
        namespace, name = key
        mr = self.kube.get(self.resource, namespace or None, name)
        if mr is None:
            return
        if mr["metadata"].get("deletionTimestamp"):
            self._finalize(Context(self.kube, self.resource, mr))
            return
        ctx = Context(self.kube, self.resource, self._claim(mr))
        phase = "connect"
        try:
            ctx.connect(self.connector)
            phase = "observe"
            observation = self.external.observe(ctx)
            if observation.conflict:
                raise ReconcileError(observation.conflict)
            if not observation.exists:
                phase = "create"
                if not allows(ctx.mr, "Create"):
                    raise ReconcileError(
                        "the external resource does not exist and spec.managementPolicies does "
                        "not allow Create: add Create (or '*'), or create it on the server"
                    )
                ctx.report(observation.at_provider)
                self._publish(ctx, self.external.create(ctx))
                observation = self.external.observe(ctx)
            elif not observation.up_to_date and allows(ctx.mr, "Update"):
                phase = "update"
                self._publish(ctx, self.external.update(ctx, observation))
                observation = self.external.observe(ctx)
            phase = "publish connection details"
            self._publish(ctx, observation.connection)
        except Exception as error:
            self._report_error(ctx, f"{phase} failed: {error}")
            raise
        ready = available() if observation.exists and observation.ready else creating()
        ctx.write_status([ready, reconcile_success()], observation.at_provider)
        self.queue.add_after(key, self.poll_interval)

    def _claim(self, mr: dict[str, Any]) -> dict[str, Any]:
        """Our finalizer and the external-name annotation, with an optimistic lock."""
        meta = mr["metadata"]
        finalizers = meta.get("finalizers") or []
        patch: dict[str, Any] = {}
        if FINALIZER not in finalizers:
            patch["finalizers"] = [*finalizers, FINALIZER]
        if EXTERNAL_NAME not in (meta.get("annotations") or {}):
            patch["annotations"] = {EXTERNAL_NAME: meta["name"]}
        if not patch:
            return mr
        patch["resourceVersion"] = meta["resourceVersion"]
        return self.kube.patch(
            self.resource, meta.get("namespace"), meta["name"], {"metadata": patch}
        )

    def _finalize(self, ctx: Context) -> None:
        """Delete the external resource (unless orphaned) and the Secret, then let go."""
        meta = ctx.mr["metadata"]
        if FINALIZER not in (meta.get("finalizers") or []):
            return
        try:
            ctx.write_status([deleting()])
            if not orphans(ctx.mr):
                ctx.connect(self.connector)
                self.external.delete(ctx)
            ref = connection_secret_ref(ctx.mr)
            secret = self.kube.get(SECRETS, *ref) if ref else None
            if ref and secret is not None and controlled_by(secret, ctx.mr):
                self.kube.delete(SECRETS, *ref)
        except Exception as error:
            self._report_error(ctx, f"delete failed: {error}")
            raise
        meta = ctx.mr["metadata"]
        finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
        self.kube.patch(
            self.resource,
            meta.get("namespace"),
            meta["name"],
            {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}},
        )

    def _publish(self, ctx: Context, details: Details | None) -> None:
        ref = connection_secret_ref(ctx.mr)
        if details is None or ref is None:
            return
        namespace, name = ref
        existing = self.kube.get(SECRETS, namespace, name)
        if existing is not None and not controlled_by(existing, ctx.mr):
            raise ReconcileError(
                f"Secret {namespace}/{name} exists and is not controlled by "
                f"{ctx.mr['kind']} {identity(ctx.mr)}: choose another "
                "spec.writeConnectionSecretToRef, or delete that Secret"
            )
        data = {k: base64.b64encode(v.encode()).decode() for k, v in sorted(details.items())}
        if existing is not None and existing.get("data") == data:
            return
        self.kube.apply(
            SECRETS,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "ownerReferences": [controller_reference(ctx.mr)],
                },
                "type": CONNECTION_SECRET_TYPE,
                "data": data,
            },
            field_manager=FIELD_MANAGER,
            force=True,
        )

    def _report_error(self, ctx: Context, message: str) -> None:
        try:
            ctx.write_status([reconcile_error(message)])
        except Exception as error:  # the object may be gone, or the API unreachable
            log.warning(
                "could not report a reconcile error",
                extra={
                    "kind": self.resource.kind,
                    "object": identity(ctx.mr),  # "name" is a LogRecord attribute
                    "error": str(error),
                },
            )
