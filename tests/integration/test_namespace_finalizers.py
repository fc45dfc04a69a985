"""The APIServiceNamespace controller writes its finalizer with the resourceVersion it read as a
precondition (issue 16, defect 6; reconciler/controllers/namespaces.py): against the real
Control Plane, a second client changes the finalizer list between the controller's read and its
write, and neither write is lost. The controller's own calls go through ``Racing``, which only
lets the second client act first; every request reaches the real API server."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, config

from klutch_gitops.apis import API_SERVICE_NAMESPACES, mapped_namespace
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.resources import NAMESPACES
from reconciler.controllers.namespaces import FINALIZER, NamespaceController

pytestmark = pytest.mark.integration

OTHER = "backup.example.com/snapshot"  # another controller's finalizer


class Racing(Kube):
    """The controller's client: before its first finalizer write, ``first`` runs (a second,
    independent client's write)."""

    def __init__(self, api: client.ApiClient, first: Callable[[], None]) -> None:
        super().__init__(api)
        self.first: Callable[[], None] | None = first

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: Any,
        subresource: str | None = None,
    ) -> dict:
        if self.first is not None and "finalizers" in (patch.get("metadata") or {}):
            first, self.first = self.first, None
            first()
        return super().patch(resource, namespace, name, patch, subresource)


@pytest.fixture
def consumer(stack, clusters) -> Iterator[str]:
    install_crds(clusters["control-plane"], load_crds(cluster="control-plane"))
    admin = Kube(clusters["control-plane"])
    name = f"cluster-{uuid.uuid4().hex[:6]}"
    admin.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    mapping = admin.get(API_SERVICE_NAMESPACES, name, "team")
    if mapping is not None:
        admin.patch(API_SERVICE_NAMESPACES, name, "team", {"metadata": {"finalizers": None}})
        admin.delete(API_SERVICE_NAMESPACES, name, "team")
    admin.delete(NAMESPACES, None, mapped_namespace(name, "team"))
    admin.delete(NAMESPACES, None, name)


def second_client(stack) -> Kube:
    return Kube(
        config.new_client_from_config(config_file=stack.clusters["control-plane"].kubeconfig)
    )


def mapping(consumer: str, finalizers: list[str] | None = None) -> dict:
    meta: dict[str, Any] = {"name": "team", "namespace": consumer}
    if finalizers:
        meta["finalizers"] = finalizers
    return {
        "apiVersion": API_SERVICE_NAMESPACES.api_version,
        "kind": "APIServiceNamespace",
        "metadata": meta,
    }


def add_other(kube: Kube, consumer: str) -> None:
    meta = kube.get(API_SERVICE_NAMESPACES, consumer, "team")["metadata"]
    finalizers = [*(meta.get("finalizers") or []), OTHER]
    patch = {"resourceVersion": meta["resourceVersion"], "finalizers": finalizers}
    kube.patch(API_SERVICE_NAMESPACES, consumer, "team", {"metadata": patch})


def test_a_finalizer_added_while_ours_is_added_survives(stack, clusters, consumer: str) -> None:
    second = second_client(stack)
    second.apply(API_SERVICE_NAMESPACES, mapping(consumer))
    controller = NamespaceController(
        Racing(clusters["control-plane"], lambda: add_other(second, consumer))
    )
    controller.reconcile((consumer, "team"))  # read [], the other adds its own, ours: 409
    assert second.get(API_SERVICE_NAMESPACES, consumer, "team")["metadata"]["finalizers"] == [OTHER]
    controller.reconcile((consumer, "team"))  # what the queued retry does
    finalizers = second.get(API_SERVICE_NAMESPACES, consumer, "team")["metadata"]["finalizers"]
    assert finalizers == [OTHER, FINALIZER]


def test_a_finalizer_removed_while_ours_is_released_stays_removed(
    stack, clusters, consumer: str
) -> None:
    """On an object being deleted the API server refuses new finalizers, so a stale list that
    still holds the other one would be a 422 (the release failed); now a 409, read again."""
    second = second_client(stack)
    second.apply(API_SERVICE_NAMESPACES, mapping(consumer, [FINALIZER, OTHER]))
    second.delete(API_SERVICE_NAMESPACES, consumer, "team")

    def remove_other() -> None:
        meta = second.get(API_SERVICE_NAMESPACES, consumer, "team")["metadata"]
        kept = [f for f in meta["finalizers"] if f != OTHER]
        patch = {"resourceVersion": meta["resourceVersion"], "finalizers": kept}
        second.patch(API_SERVICE_NAMESPACES, consumer, "team", {"metadata": patch})

    controller = NamespaceController(Racing(clusters["control-plane"], remove_other))
    controller.reconcile((consumer, "team"))  # its mapped namespace does not exist: release
    assert second.get(API_SERVICE_NAMESPACES, consumer, "team") is None
