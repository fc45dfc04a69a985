"""The consumer label of earlier binds, moved to today's key on a real App Cluster: once, and
never again."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from klutch_gitops.apis import API_SERVICE_BINDINGS, CONSUMER_LABEL
from klutch_gitops.bind.client import BIND_NAMESPACE, FIELD_MANAGER, namespace_object
from klutch_gitops.bind.relabel import OLD_CONSUMER_LABEL, relabel
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.resources import NAMESPACES, SECRETS


def earlier(resource: Resource, namespace: str | None, name: str, consumer: str) -> dict[str, Any]:
    """An object as klutch-bind wrote it before the label moved."""
    meta = {"name": name, "labels": {OLD_CONSUMER_LABEL: consumer}}
    obj: dict[str, Any] = {"apiVersion": resource.api_version, "kind": resource.kind}
    obj["metadata"] = {**meta, "namespace": namespace} if namespace else meta
    if resource is API_SERVICE_BINDINGS:
        ref = {"namespace": BIND_NAMESPACE, "name": f"{consumer}-kubeconfig", "key": "kubeconfig"}
        obj["spec"] = {"kubeconfigSecretRef": ref}
    return obj


def test_an_earlier_binds_objects_get_the_consumer_label(
    clusters: dict[str, client.ApiClient],
) -> None:
    app = Kube(clusters["app"])
    consumer = f"old-{uuid.uuid4().hex[:6]}"
    objects = [
        (SECRETS, BIND_NAMESPACE, f"{consumer}-kubeconfig"),
        (API_SERVICE_BINDINGS, None, f"{consumer}.example.com"),
    ]
    app.apply(NAMESPACES, namespace_object(), field_manager=FIELD_MANAGER)
    for resource, namespace, name in objects:
        app.apply(
            resource, earlier(resource, namespace, name, consumer), field_manager=FIELD_MANAGER
        )
    try:
        patched = relabel(app)
        for resource, namespace, name in objects:
            assert f"{resource.kind}/{name}" in patched
            live = app.get(resource, namespace, name)
            assert live is not None
            labels = live["metadata"]["labels"]
            assert labels == {OLD_CONSUMER_LABEL: consumer, CONSUMER_LABEL: consumer}
        assert relabel(app) == []
    finally:
        for resource, namespace, name in objects:
            app.delete(resource, namespace, name)
