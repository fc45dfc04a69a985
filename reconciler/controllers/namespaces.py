"""The APIServiceNamespace controller: the Control Plane half of namespace mapping.

A consumer asks for App namespace ``X`` with an APIServiceNamespace ``X`` in its consumer namespace
``C``; this privileged controller creates namespace ``C-X``, a Role over exactly the APIs exported
to ``C`` (plus read access to what their permission claims name), binds it to the consumer's
ServiceAccount ``klutch-binder`` together with the ClusterRole ``klutch-binder-claimed-secrets``
(update on existing Secrets: Klutch's konnector marks a claimed Secret provider-owned with an
Update), and reports ``status.namespace``. A namespace that already exists
without this consumer's label belongs to someone else and is never taken over.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    APP_NAMESPACE_LABEL,
    CONSUMER_LABEL,
    mapped_namespace,
)
from klutch_gitops.binder_roles import CLAIMED_SECRETS_ROLE, ensure_cluster_role, role_binding
from klutch_gitops.consumer import binder_role
from klutch_gitops.kube import conditions
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.informer import Informer
from klutch_gitops.kube.resources import NAMESPACES, ROLE_BINDINGS
from klutch_gitops.kube.workqueue import WorkQueue, run_workers

log = logging.getLogger(__name__)

FIELD_MANAGER = "klutch-gitops-bind"
FINALIZER = "klutch.anynines.com/namespace"
CLAIM_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ_VERBS = ["get", "list", "watch"]
RELEASE_ATTEMPTS = 3  # re-reads of a mapping whose finalizers changed under the release


def role_rules(exports: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Full rights on each exported resource; read-only on what its permission claims name.

    The konnector's Update of a claimed Secret comes from ``klutch-binder-claimed-secrets``,
    which the reconciler may bind without holding it (``desired_objects``).
    """
    rules = []
    for export in sorted(exports, key=lambda e: e["metadata"]["name"]):
        spec = export.get("spec") or {}
        rules.append(
            {
                "apiGroups": [spec.get("group", "")],
                "resources": [spec.get("names", {}).get("plural", "")],
                "verbs": CLAIM_VERBS,
            }
        )
        for claim in spec.get("permissionClaims") or []:
            rules.append(
                {
                    "apiGroups": [claim.get("group", "")],
                    "resources": [claim["resource"]],
                    "verbs": READ_VERBS,
                }
            )
    return rules


def desired_objects(
    mapping: dict[str, Any], exports: Iterable[dict[str, Any]]
) -> list[tuple[Resource, dict[str, Any]]]:
    """The namespace, Role and RoleBindings that one APIServiceNamespace asks for."""
    consumer = mapping["metadata"]["namespace"]
    app_namespace = mapping["metadata"]["name"]
    target = mapped_namespace(consumer, app_namespace)
    labels = {
        CONSUMER_LABEL: consumer,
        APP_NAMESPACE_LABEL: app_namespace,
        "app.kubernetes.io/managed-by": "klutch-gitops",
    }
    return [
        (
            NAMESPACES,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": target, "labels": labels},
            },
        ),
        *binder_role(target, consumer, role_rules(exports), labels),
        (ROLE_BINDINGS, role_binding(target, CLAIMED_SECRETS_ROLE, consumer, labels)),
    ]


def foreign(namespace: dict[str, Any] | None, consumer: str) -> bool:
    """Whether an existing namespace belongs to someone other than ``consumer``."""
    if namespace is None:
        return False
    return (namespace["metadata"].get("labels") or {}).get(CONSUMER_LABEL) != consumer


class NamespaceController:
    """Reconciles every APIServiceNamespace on the Control Plane (admin credentials)."""

    def __init__(self, kube: Kube, workers: int = 2) -> None:
        self.kube = kube
        self.workers = workers
        self.queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self.mappings = Informer(
            kube, API_SERVICE_NAMESPACES, self._on_mapping, name="apiservicenamespaces"
        )
        self.exports = Informer(
            kube, API_SERVICE_EXPORTS, self._on_export, name="apiserviceexports"
        )

    def start(self) -> NamespaceController:
        ensure_cluster_role(self.kube, CLAIMED_SECRETS_ROLE)
        self.exports.start()
        self.exports.synced.wait(30)
        self.mappings.start()
        run_workers(self.queue, self.reconcile, self.workers, "apiservicenamespace")
        return self

    def stop(self) -> None:
        self.mappings.stop()
        self.exports.stop()
        self.queue.shutdown()

    def _on_mapping(self, _event: str, obj: dict[str, Any]) -> None:
        self.queue.add((obj["metadata"]["namespace"], obj["metadata"]["name"]))

    def _on_export(self, _event: str, obj: dict[str, Any]) -> None:
        consumer = obj["metadata"]["namespace"]
        for mapping in self.mappings.items():
            if mapping["metadata"]["namespace"] == consumer:
                self.queue.add((consumer, mapping["metadata"]["name"]))

    def reconcile(self, key: tuple[str, str]) -> None:
        consumer, name = key
        mapping = self.kube.get(API_SERVICE_NAMESPACES, consumer, name)
        if mapping is None:
            return
        target = mapped_namespace(consumer, name)
        if mapping["metadata"].get("deletionTimestamp"):
            self._finalize(mapping, target)
            return
        finalizers = mapping["metadata"].get("finalizers") or []
        if FINALIZER not in finalizers and not self._set_finalizers(
            mapping, [*finalizers, FINALIZER]
        ):
            self.queue.add(key)  # changed meanwhile: read it again
            return
        if foreign(self.kube.get(NAMESPACES, None, target), consumer):
            log.error(
                "namespace belongs to another consumer; not taking it over",
                extra={"consumer": consumer, "namespace": target},
            )
            self._report(
                mapping,
                None,
                "NamespaceConflict",
                f"namespace {target} exists and does not belong to {consumer}",
            )
            return
        exports = [e for e in self.exports.items() if e["metadata"]["namespace"] == consumer]
        for resource, obj in desired_objects(mapping, exports):
            self.kube.apply(resource, obj, field_manager=FIELD_MANAGER, force=True)
        self._report(mapping, target, "Mapped", f"App namespace {name} maps to {target}")

    def _report(
        self, mapping: dict[str, Any], target: str | None, reason: str, message: str
    ) -> None:
        meta = mapping["metadata"]
        old = mapping.get("status") or {}
        status: dict[str, Any] = {"namespace": target} if target else {}
        status["conditions"] = conditions.set_conditions(
            old.get("conditions") or [],
            [conditions.condition("Ready", bool(target), reason, message)],
            meta.get("generation", 1),
            conditions.now(),
        )
        if conditions.unchanged(old, status):
            return
        self.kube.apply(
            API_SERVICE_NAMESPACES,
            {
                "apiVersion": API_SERVICE_NAMESPACES.api_version,
                "kind": "APIServiceNamespace",
                "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                "status": status,
            },
            field_manager=FIELD_MANAGER,
            force=True,
            subresource="status",
        )

    def _finalize(self, mapping: dict[str, Any], target: str) -> None:
        """Delete the mapped namespace (with everything in it), then let the mapping go."""
        consumer = mapping["metadata"]["namespace"]
        namespace = self.kube.get(NAMESPACES, None, target)
        if namespace is not None and not foreign(namespace, consumer):
            self.kube.delete(NAMESPACES, None, target)
            self.queue.add_after((consumer, mapping["metadata"]["name"]), 1.0)
            return
        current: dict[str, Any] | None = mapping
        for _ in range(RELEASE_ATTEMPTS):
            if current is None or FINALIZER not in (current["metadata"].get("finalizers") or []):
                return
            kept = [f for f in current["metadata"]["finalizers"] if f != FINALIZER]
            if self._set_finalizers(current, kept):
                return
            current = self.kube.get(API_SERVICE_NAMESPACES, consumer, mapping["metadata"]["name"])
        self.queue.add_after((consumer, mapping["metadata"]["name"]), 1.0)

    def _set_finalizers(self, mapping: dict[str, Any], finalizers: list[str]) -> bool:
        """Write the finalizer list with the resourceVersion it was read at as a precondition:
        a merge patch replaces the whole list, so a finalizer another controller added since
        would be lost; the API server answers 409 instead. False then (read it again), and when
        the mapping is gone."""
        meta = mapping["metadata"]
        patch = {"resourceVersion": meta["resourceVersion"], "finalizers": finalizers or None}
        try:
            self.kube.patch(
                API_SERVICE_NAMESPACES, meta["namespace"], meta["name"], {"metadata": patch}
            )
        except KubeError as error:
            if error.not_found or error.conflict:
                return False
            raise
        return True
