"""The RepositoryBinding CRD generated from klutch_gitops/models (``python -m
klutch_gitops.models.schemas``) on the local stack's real apiserver: it is accepted as a
structural schema, and the apiserver agrees with the model on what a spec may hold.

Kubernetes' rules followed: "Specifying a structural schema" and "Field pruning" in
https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/custom-resource-definitions/
(every node typed, no ``additionalProperties`` beside ``properties``, unknown fields pruned unless
the request asks for ``fieldValidation=Strict``, which refuses them). Every create is a dry run:
validated, defaulted and pruned like a real one, seen by no reconciler.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from klutch_gitops.apis import REPOSITORY_BINDINGS
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.crds import install_crds
from klutch_gitops.models.schemas import CRD_FILES
from klutch_gitops.repository_config import from_repository_binding


@pytest.fixture(scope="module")
def custom(clusters: dict[str, client.ApiClient]) -> client.CustomObjectsApi:
    """The control plane with the generated CRD (catalog/crds, as the reconciler installs it)."""
    control_plane = clusters["control-plane"]
    install_crds(control_plane, [yaml.safe_load(CRD_FILES[0].read_text())])
    return client.CustomObjectsApi(control_plane)


def create(
    custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], strict: bool = True
) -> dict[str, Any]:
    return custom.create_namespaced_custom_object(
        REPOSITORY_BINDINGS.group,
        REPOSITORY_BINDINGS.version,
        namespace,
        REPOSITORY_BINDINGS.plural,
        {
            "apiVersion": f"{REPOSITORY_BINDINGS.group}/{REPOSITORY_BINDINGS.version}",
            "kind": "RepositoryBinding",
            "metadata": {"name": "orders"},
            "spec": spec,
        },
        dry_run="All",
        field_validation="Strict" if strict else "Ignore",
    )


def refused(custom: client.CustomObjectsApi, namespace: str, spec: dict[str, Any]) -> str:
    with pytest.raises(ApiException) as raised:
        create(custom, namespace, spec)
    assert raised.value.status in (400, 422), raised.value
    return json.loads(raised.value.body)["message"]


SPEC = {
    "url": "https://git.example.com/team/orders.git",
    "appNamespaces": ["orders"],
    "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
    "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
}


def test_a_valid_spec_is_defaulted_like_the_model(
    custom: client.CustomObjectsApi, namespace: Any
) -> None:
    created = create(custom, namespace.name, {**SPEC, "pollInterval": "1m30s"})
    spec = created["spec"]
    assert (spec["branch"], spec["path"], spec["appSync"], spec["suspend"]) == (
        "main",
        ".",
        "reconciler",
        False,
    )
    assert spec["writeBack"] == {"mode": "inline", "branch": "klutch-status"}
    assert spec["appCluster"]["kubeconfigSecretRef"]["key"] == "kubeconfig"
    registration = from_repository_binding(created)
    assert registration.poll_interval == 90.0


@pytest.mark.parametrize("duration", ["0s", "30", "1d", "-1s", "1 m"])
def test_a_bad_duration_is_refused_by_the_apiserver_and_the_model(
    custom: client.CustomObjectsApi, namespace: Any, duration: str
) -> None:
    message = refused(custom, namespace.name, {**SPEC, "pollInterval": duration})
    assert "spec.pollInterval" in message
    with pytest.raises(KlutchError, match=r"spec\.pollInterval"):
        from_repository_binding(
            {
                "metadata": {"namespace": "n", "name": "o"},
                "spec": {**SPEC, "pollInterval": duration},
            }
        )


def test_an_unknown_field_is_refused_when_strict_and_pruned_otherwise(
    custom: client.CustomObjectsApi, namespace: Any
) -> None:
    message = refused(custom, namespace.name, {**SPEC, "pollIntervall": "1s"})
    assert 'unknown field "spec.pollIntervall"' in message
    pruned = create(custom, namespace.name, {**SPEC, "pollIntervall": "1s"}, strict=False)
    assert "pollIntervall" not in pruned["spec"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"suspend": "false"}, "spec.suspend"),
        ({"writeBack": {"mode": "branch", "branch": "main"}}, "writeBack.branch must differ"),
        ({"branch": "a..b"}, "spec.branch"),
        ({"appNamespaces": ["orders", "orders"]}, "spec.appNamespaces"),
        ({"url": "file:///srv/git/other.git"}, "spec.url"),
    ],
)
def test_the_apiserver_refuses_what_the_model_refuses(
    custom: client.CustomObjectsApi, namespace: Any, change: dict[str, Any], field: str
) -> None:
    assert field in refused(custom, namespace.name, {**SPEC, **change})
    with pytest.raises(KlutchError):
        from_repository_binding(
            {"metadata": {"namespace": "n", "name": "o"}, "spec": {**SPEC, **change}}
        )
