"""The clusters as a sync pass sees them: the informer caches and the client calls its stages make.

Every stage reads and writes the App Cluster and the Control Plane only through a ``View``, so each
stage is unit-tested against an in-memory fake (tests/unit/reconciler/sync/test_sync_stages.py), in
the style of kube-bind's ``*_reconcile.go``. ``ClusterView`` is the real one: the registration's two
clients and the informers that keep a pass cheap (cluster state from caches, only differences
written).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from klutch_gitops.apis import (
    API_SERVICE_BINDINGS,
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    REPOSITORY_LABEL,
)
from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.events import WARNING, EventRecorder
from klutch_gitops.kube.informer import slim, slim_copy
from klutch_gitops.kube.resources import CRDS, SECRETS
from klutch_gitops.kube.shared import Route, Subscription
from reconciler.manifests import Claim, Export
from reconciler.sync.connection import Connection

SERVICE_BINDINGS_CRD = f"{API_SERVICE_BINDINGS.plural}.{API_SERVICE_BINDINGS.group}"


def resource_of(export: Export, version: str | None = None) -> Resource:
    return Resource(
        export.group, version or next(iter(export.schemas), "v1"), export.plural, export.kind
    )


def claim_resource(export: Export, claim: Claim) -> Resource:
    """The resource of a claim at the version Git names."""
    return resource_of(export, claim.api_version.rpartition("/")[2])


class View(Protocol):
    """What the stages may see and do; nothing else of the clusters."""

    exports: dict[tuple[str, str], Export]  # (group, kind) -> what the Control Plane exports
    mapping: dict[str, str]  # App namespace -> Control Plane namespace

    def export_of(self, claim: Claim) -> Export: ...

    # -- App Cluster
    def watch_service_bindings(self) -> None: ...
    def app_crd(self, name: str) -> dict[str, Any] | None: ...
    def serve_crd(self, crd: dict[str, Any]) -> None: ...
    def service_binding(self, name: str) -> dict[str, Any] | None: ...
    def app_secret(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def watch_kind(self, export: Export) -> None: ...
    def app_claims(self, export: Export) -> list[dict[str, Any]]: ...
    def app_claim(self, export: Export, namespace: str, name: str) -> dict[str, Any] | None: ...
    def get_app(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None: ...
    def apply_app(
        self, resource: Resource, body: dict[str, Any], *, force: bool = False, status: bool = False
    ) -> dict[str, Any]: ...
    def patch_app(
        self, resource: Resource, namespace: str, name: str, patch: dict[str, Any]
    ) -> None: ...
    def delete_app(self, resource: Resource, namespace: str, name: str) -> None: ...
    def secret_copies(self) -> list[dict[str, Any]]: ...
    def secret_copy(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def event(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        reason: str,
        msg: str,
        type_: str = WARNING,
    ) -> None: ...

    # -- Control Plane
    def namespace_mapping(self, namespace: str) -> dict[str, Any] | None: ...
    def request_namespace_mapping(self, namespace: str) -> None: ...
    def map_namespace(self, namespace: str, target: str) -> None: ...
    def watch_mapped_claims(self) -> None: ...
    def cp_claim(self, export: Export, target: str, name: str) -> dict[str, Any] | None: ...
    def get_cp(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None: ...
    def apply_cp(self, resource: Resource, body: dict[str, Any]) -> None: ...
    def delete_cp(self, resource: Resource, namespace: str, name: str) -> bool: ...
    def cp_secrets_synced(self, target: str) -> bool: ...
    def cp_secret(self, target: str, name: str) -> dict[str, Any] | None: ...


class ClusterView:
    """The real view: ``connection.app`` and ``connection.control_plane``, read through informers.

    ``on_change`` asks for another pass; an informer calls it when what it watches changes.
    The informers are the process's shared ones (``connection.caches``): on the App Cluster one per
    kind for every repository with the same App identity, selected by our repository label and
    routed by its value (``appSync: external`` registrations, which must see unlabelled objects,
    share one unlabelled informer per kind among themselves); on the Control Plane one per
    binding identity, kind and namespace, so never across tenants.
    """

    def __init__(
        self, connection: Connection, external: bool, on_change: Callable[[], None]
    ) -> None:
        self.app = connection.app
        self.cp = connection.control_plane
        self.spec = connection.spec
        self.name = connection.spec.name
        self.external = external
        self._on_change = on_change
        self.caches = connection.caches
        self.route = Route(REPOSITORY_LABEL, self.name)
        self.exports: dict[tuple[str, str], Export] = {}
        self.mapping: dict[str, str] = {}
        self.app_claim_caches: dict[str, Subscription] = {}  # plural.group -> informer
        self.cp_claim_caches: dict[tuple[str, str], Subscription] = {}  # (plural.group, cp ns)
        self.cp_secret_caches: dict[str, Subscription] = {}
        self.app_secret_cache = self.caches.subscribe(
            self.app, SECRETS, self._on_event, route=self.route, transform=slim_copy
        )
        self.service_bindings: Subscription | None = None  # a trigger: APIServiceBinding changes
        self._service_bindings_forbidden = False
        self.recorder = EventRecorder(self.app)

    # -- triggers ---------------------------------------------------------------------------

    def _on_event(self, _event: str, _obj: dict[str, Any]) -> None:
        self._on_change()

    def _on_app_event(self, _event: str, obj: dict[str, Any]) -> None:
        """In external mode the App informer sees every claim of its kind: only ours count."""
        if obj["metadata"].get("namespace") in self.spec.app_namespaces:
            self._on_change()

    def _on_service_binding(self, _event: str, obj: dict[str, Any]) -> None:
        """A konnector binding for one of our kinds came, changed or went: decide again."""
        if obj["metadata"].get("name") in {e.name for e in list(self.exports.values())}:
            self._on_change()

    def _caches(self) -> list[Subscription]:
        return [
            *self.app_claim_caches.values(),
            *self.cp_claim_caches.values(),
            *self.cp_secret_caches.values(),
            self.app_secret_cache,
        ]

    def synced(self) -> bool:
        """Every cache filled: a pass sees the whole picture."""
        return all(i.synced.is_set() for i in self._caches())

    def stop(self) -> None:
        for informer in self._caches():
            informer.stop()
        if self.service_bindings is not None:
            self.service_bindings.stop()

    # -- exports and kinds ------------------------------------------------------------------

    def list_exports(self) -> list[dict[str, Any]]:
        items, _ = self.cp.list(API_SERVICE_EXPORTS, self.spec.consumer_namespace)
        self.exports = {(e.group, e.kind): e for e in map(Export.of, items)}
        return items

    def export_of(self, claim: Claim) -> Export:
        return self.exports[(claim.identity.group, claim.identity.kind)]

    def app_crd(self, name: str) -> dict[str, Any] | None:
        return self.app.get(CRDS, None, name)

    def serve_crd(self, crd: dict[str, Any], timeout: float = 30.0) -> None:
        """Apply the CRD and wait (up to ``timeout``) until the App Cluster serves its kind."""
        self.app.apply(CRDS, crd, force=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = self.app.get(CRDS, None, crd["metadata"]["name"]) or {}
            conditions = (live.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            time.sleep(0.1)

    def service_binding(self, name: str) -> dict[str, Any] | None:
        """The App Cluster's APIServiceBinding named after an export (as ``kubectl bind`` and
        the konnector name it), or None where there is none or we may not read it."""
        try:
            return self.app.get(API_SERVICE_BINDINGS, None, name)
        except KubeError as error:
            if error.status == 403:
                self._service_bindings_forbidden = True
                return None
            raise

    def app_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.app.get(SECRETS, namespace, name)

    def watch_kind(self, export: Export) -> None:
        if export.name in self.app_claim_caches:
            return
        # external: the tool's new objects carry no label of ours until adopted
        self.app_claim_caches[export.name] = self.caches.subscribe(
            self.app,
            resource_of(export),
            self._on_app_event if self.external else self._on_event,
            route=None if self.external else self.route,
            transform=slim,
        )

    def watch_service_bindings(self) -> None:
        if (
            self.service_bindings is None
            and not self._service_bindings_forbidden
            and self.app.get(CRDS, None, SERVICE_BINDINGS_CRD) is not None
        ):  # without Klutch's CRD there is nothing to watch, and a watch would only fail
            self.service_bindings = self.caches.subscribe(
                self.app, API_SERVICE_BINDINGS, self._on_service_binding, transform=slim
            )

    # -- App claims and Secret copies -------------------------------------------------------

    def app_claims(self, export: Export) -> list[dict[str, Any]]:
        informer = self.app_claim_caches.get(export.name)
        return informer.items() if informer else []

    def app_claim(self, export: Export, namespace: str, name: str) -> dict[str, Any] | None:
        informer = self.app_claim_caches.get(export.name)
        return informer.get(namespace, name) if informer else None

    def get_app(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.app.get(resource, namespace, name)

    def apply_app(
        self, resource: Resource, body: dict[str, Any], *, force: bool = False, status: bool = False
    ) -> dict[str, Any]:
        return self.app.apply(resource, body, force=force, subresource="status" if status else None)

    def patch_app(
        self, resource: Resource, namespace: str, name: str, patch: dict[str, Any]
    ) -> None:
        self.app.patch(resource, namespace, name, patch)

    def delete_app(self, resource: Resource, namespace: str, name: str) -> None:
        self.app.delete(resource, namespace, name)

    def secret_copies(self) -> list[dict[str, Any]]:
        return self.app_secret_cache.items()

    def secret_copy(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.app_secret_cache.get(namespace, name)

    def event(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        reason: str,
        msg: str,
        type_: str = WARNING,
    ) -> None:
        """An Event on the App claim, where `kubectl describe` shows it; repeats aggregate."""
        self.recorder.record(resource, obj, type_, reason, msg)

    # -- Control Plane ----------------------------------------------------------------------

    def namespace_mapping(self, namespace: str) -> dict[str, Any] | None:
        return self.cp.get(API_SERVICE_NAMESPACES, self.spec.consumer_namespace, namespace)

    def request_namespace_mapping(self, namespace: str) -> None:
        self.cp.apply(
            API_SERVICE_NAMESPACES,
            {
                "apiVersion": API_SERVICE_NAMESPACES.api_version,
                "kind": "APIServiceNamespace",
                "metadata": {"name": namespace, "namespace": self.spec.consumer_namespace},
                "spec": {},
            },
        )

    def map_namespace(self, namespace: str, target: str) -> None:
        """Record the mapping and watch the target's Secrets and every exported kind there."""
        self.mapping[namespace] = target
        if target not in self.cp_secret_caches:
            self.cp_secret_caches[target] = self.caches.subscribe(
                self.cp, SECRETS, self._on_event, namespace=target, transform=slim_copy
            )

    def watch_mapped_claims(self) -> None:
        """Watch every exported kind in every mapped Control Plane namespace."""
        for export in self.exports.values():
            for target in self.mapping.values():
                if (export.name, target) not in self.cp_claim_caches:
                    self.cp_claim_caches[(export.name, target)] = self.caches.subscribe(
                        self.cp,
                        resource_of(export),
                        self._on_event,
                        namespace=target,
                        transform=slim_copy,
                    )

    def cp_claim(self, export: Export, target: str, name: str) -> dict[str, Any] | None:
        cache = self.cp_claim_caches.get((export.name, target))
        return cache.get(target, name) if cache else None

    def get_cp(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        return self.cp.get(resource, namespace, name)

    def apply_cp(self, resource: Resource, body: dict[str, Any]) -> None:
        self.cp.apply(resource, body, force=True)

    def delete_cp(self, resource: Resource, namespace: str, name: str) -> bool:
        return self.cp.delete(resource, namespace, name)

    def cp_secrets_synced(self, target: str) -> bool:
        cache = self.cp_secret_caches.get(target)
        return cache is not None and cache.synced.is_set()

    def cp_secret(self, target: str, name: str) -> dict[str, Any] | None:
        cache = self.cp_secret_caches.get(target)
        return cache.get(target, name) if cache else None
