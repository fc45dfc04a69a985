"""The consumer label of earlier binds, moved to today's key on a real App Cluster: once, and
never again."""

from __future__ import annotations

import uuid

from kubernetes import client

from klutch_gitops.apis import API_SERVICE_BINDINGS, CONSUMER_LABEL
from klutch_gitops.bind.client import BIND_NAMESPACE
from klutch_gitops.bind.relabel import OLD_CONSUMER_LABEL, relabel
from klutch_gitops.kube.client import FIELD_MANAGER, Kube
from klutch_gitops.kube.resources import NAMESPACES, SECRETS


def test_an_earlier_binds_objects_get_the_consumer_label(
    clusters: dict[str, client.ApiClient],
) -> None:
    app = Kube(clusters["app"])
    consumer = f"old-{uuid.uuid4().hex[:6]}"
    labels = {OLD_CONSUMER_LABEL: consumer}
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": f"{consumer}-kubeconfig",
            "namespace": BIND_NAMESPACE,
            "labels": labels,
        },
    }
    binding = {
        "apiVersion": API_SERVICE_BINDINGS.api_version,
        "kind": API_SERVICE_BINDINGS.kind,
        "metadata": {"name": f"{consumer}.example.com", "labels": labels},
        "spec": {
            "kubeconfigSecretRef": {
                "namespace": BIND_NAMESPACE,
                "name": f"{consumer}-kubeconfig",
                "key": "kubeconfig",
            }
        },
    }
    app.apply(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BIND_NAMESPACE}},
        field_manager=FIELD_MANAGER,
    )
    app.apply(SECRETS, secret, field_manager=FIELD_MANAGER)
    app.apply(API_SERVICE_BINDINGS, binding, field_manager=FIELD_MANAGER)
    try:
        patched = relabel(app)
        assert {
            f"Secret/{consumer}-kubeconfig",
            f"APIServiceBinding/{consumer}.example.com",
        } <= set(patched)
        for resource, obj in ((SECRETS, secret), (API_SERVICE_BINDINGS, binding)):
            live = app.get(resource, obj["metadata"].get("namespace"), obj["metadata"]["name"])
            assert live is not None
            assert live["metadata"]["labels"] == {
                OLD_CONSUMER_LABEL: consumer,
                CONSUMER_LABEL: consumer,
            }
        assert relabel(app) == []
    finally:
        app.delete(SECRETS, BIND_NAMESPACE, secret["metadata"]["name"])
        app.delete(API_SERVICE_BINDINGS, None, binding["metadata"]["name"])
