"""The binder's ClusterRoles for Klutch's konnector: one source, shipped by the chart."""

from __future__ import annotations

import yaml

from klutch_gitops.binder_roles import (
    CLAIMED_SECRETS_ROLE,
    CONSUMER_ROLE,
    ROLE_FILE,
    load_cluster_role,
)
from klutch_gitops.consumer import namespaced_objects
from reconciler.controllers.namespaces import desired_objects
from tests.helm import CHART, VALUE_SETS, render


def test_the_charts_copy_is_the_catalogs() -> None:
    """Helm reads only files inside the chart, so rbac/ holds a copy: kept byte-identical."""
    assert [path.name for path in (CHART / "rbac").iterdir()] == [ROLE_FILE.name]
    assert (CHART / "rbac" / ROLE_FILE.name).read_bytes() == ROLE_FILE.read_bytes(), (
        f"charts/klutch-gitops/rbac/{ROLE_FILE.name} differs from catalog/rbac/{ROLE_FILE.name}: "
        f"cp catalog/rbac/{ROLE_FILE.name} charts/klutch-gitops/rbac/"
    )


def test_the_chart_renders_the_same_cluster_roles() -> None:
    docs = render([VALUE_SETS["default"]])
    rendered = {
        doc["metadata"]["name"]: doc
        for doc in docs
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"].startswith("klutch-binder")
    }
    for doc in rendered.values():
        assert doc["metadata"].pop("labels")["app.kubernetes.io/component"] == "binder"
    assert rendered == {
        name: load_cluster_role(name) for name in (CONSUMER_ROLE, CLAIMED_SECRETS_ROLE)
    }


def test_what_they_grant_is_klutchs_binder_for_the_konnector_and_no_more() -> None:
    """Klutch's binder: get namespaces, get/list/watch secrets (anynines/klutchio bind/contrib/
    example-backend/deploy/01-clusterrole.yaml); in mapped namespaces the konnector's Update of a
    claimed Secret (makeProviderOwner), never create or delete."""
    assert load_cluster_role(CONSUMER_ROLE)["rules"] == [
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
    ]
    assert load_cluster_role(CLAIMED_SECRETS_ROLE)["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["update"]}
    ]
    assert len(list(yaml.safe_load_all(ROLE_FILE.read_text()))) == 2


def cluster_role_bindings(objects: list) -> list[dict]:
    return [
        obj
        for _, obj in objects
        if obj["kind"] == "RoleBinding" and obj["roleRef"]["kind"] == "ClusterRole"
    ]


def test_they_are_bound_per_namespace_to_the_consumers_binder_only() -> None:
    consumer = cluster_role_bindings(namespaced_objects("cluster-abc", ()))
    assert [(b["metadata"]["namespace"], b["roleRef"]["name"]) for b in consumer] == [
        ("cluster-abc", CONSUMER_ROLE)
    ]
    assert consumer[0]["subjects"] == [
        {"kind": "ServiceAccount", "name": "klutch-binder", "namespace": "cluster-abc"}
    ]
    mapping = {"metadata": {"name": "team", "namespace": "cluster-abc"}}
    mapped = cluster_role_bindings(desired_objects(mapping, []))
    assert [(b["metadata"]["namespace"], b["roleRef"]) for b in mapped] == [
        (
            "cluster-abc-team",
            {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CLAIMED_SECRETS_ROLE,
            },
        )
    ]
    assert mapped[0]["subjects"] == consumer[0]["subjects"]
