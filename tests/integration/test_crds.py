"""The CRDs on a real kube-apiserver: they install idempotently, and their rules are enforced."""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.crds import install_crds, load_crds
from tests.conftest import TwinNamespace

BIND = "klutch.anynines.com/v1alpha1"
GITOPS = "gitops.klutch.anynines.com/v1alpha1"
PLURALS = {
    "APIServiceExportTemplate": "apiserviceexporttemplates",
    "APIServiceExportRequest": "apiserviceexportrequests",
    "APIServiceExport": "apiserviceexports",
    "APIServiceBinding": "apiservicebindings",
    "APIServiceNamespace": "apiservicenamespaces",
    "ClusterBinding": "clusterbindings",
    "RepositoryBinding": "repositorybindings",
}
SECRETS_CLAIM = {
    "group": "",
    "resource": "secrets",
    "version": "v1",
    "selector": {"owner": "Provider"},
    "required": True,
}
PG_SCHEMA = {
    "type": "object",
    "properties": {"spec": {"type": "object", "properties": {"plan": {"type": "string"}}}},
}


def condition(kind: str = "Ready") -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True",
        "reason": "Testing",
        "message": "set by a test",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
        "observedGeneration": 1,
    }


def repository_binding(name: str = "app-repo", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": GITOPS,
        "kind": "RepositoryBinding",
        "metadata": {"name": name},
        "spec": {
            "url": "https://git.example.com/team/app.git",
            "appNamespaces": ["team-a"],
            "appCluster": {"kubeconfigSecretRef": {"name": "app-kubeconfig"}},
            "controlPlane": {"kubeconfigSecretRef": {"name": "binding-kubeconfig"}},
            **spec,
        },
    }


# (cluster, object, status): one valid object of each kind, with a status its controller could write
VALID: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    *(
        (
            "control-plane",
            {
                "apiVersion": api_version,
                "kind": "APIServiceExportTemplate",
                "metadata": {"name": "postgresql"},
                "spec": {
                    "APIServiceSelector": {
                        "group": "anynines.com",
                        "resource": "postgresqlinstances",
                    },
                    "permissionClaims": [SECRETS_CLAIM],
                },
            },
            {"note": "templates have no status of their own"},
        )
        for api_version in ("example-backend.klutch.anynines.com/v1alpha1", BIND)
    ),
    (
        "control-plane",
        {
            "apiVersion": BIND,
            "kind": "APIServiceExportRequest",
            "metadata": {"name": "postgresqlinstances.anynines.com"},
            "spec": {
                "resources": [
                    {
                        "group": "anynines.com",
                        "resource": "postgresqlinstances",
                        "versions": ["v1"],
                        "permissionClaims": [SECRETS_CLAIM],
                    }
                ],
                "parameters": {"anything": {"goes": [1, 2]}},
            },
        },
        {"phase": "Succeeded", "conditions": [condition("ExportsReady"), condition()]},
    ),
    (
        "control-plane",
        {
            "apiVersion": BIND,
            "kind": "APIServiceExport",
            "metadata": {
                "name": "postgresqlinstances.anynines.com",
                "annotations": {"klutch.anynines.com/source-spec-hash": "abc123"},
            },
            "spec": {
                "group": "anynines.com",
                "names": {
                    "plural": "postgresqlinstances",
                    "singular": "postgresqlinstance",
                    "kind": "PostgresqlInstance",
                    "listKind": "PostgresqlInstanceList",
                },
                "scope": "Namespaced",
                "versions": [
                    {
                        "name": "v1",
                        "served": True,
                        "storage": True,
                        "schema": {"openAPIV3Schema": PG_SCHEMA},
                        "subresources": {"status": {}},
                        "additionalPrinterColumns": [
                            {"name": "Plan", "type": "string", "jsonPath": ".spec.plan"}
                        ],
                    }
                ],
                "permissionClaims": [SECRETS_CLAIM],
                "informerScope": "Namespaced",
                "clusterScopedIsolation": "Namespaced",
            },
        },
        {
            "acceptedNames": {"plural": "postgresqlinstances", "kind": "PostgresqlInstance"},
            "storedVersions": ["v1"],
            "conditions": [condition("Connected"), condition()],
        },
    ),
    (
        "control-plane",
        {
            "apiVersion": BIND,
            "kind": "APIServiceNamespace",
            "metadata": {"name": "team-a"},
            "spec": {},
        },
        {"namespace": "cluster-x1y2-team-a"},
    ),
    (
        "control-plane",
        {
            "apiVersion": BIND,
            "kind": "ClusterBinding",
            "metadata": {"name": "cluster"},
            "spec": {
                "kubeconfigSecretRef": {"name": "kubeconfig", "key": "kubeconfig"},
                "providerPrettyName": "anynines",
            },
        },
        {
            "lastHeartbeatTime": "2025-01-01T00:00:00Z",
            "heartbeatInterval": "30s",
            "konnectorVersion": "v1.0.0",
            "conditions": [condition("Healthy"), condition()],
        },
    ),
    (
        "control-plane",
        repository_binding(
            branch="release",
            path="envs/prod",
            credentialsSecretRef={"name": "git-credentials"},
            webhookSecretRef={"name": "webhook", "key": "secret"},
            writeBack={
                "mode": "branch",
                "branch": "status",
                "author": {"name": "Klutch Bot", "email": "bot@example.com"},
            },
            suspend=False,
            pollInterval="1m30s",
        ),
        {
            "observedGeneration": 1,
            "lastFetchedCommit": "a" * 40,
            "lastAppliedCommit": "b" * 40,
            "lastStatusCommit": "c" * 64,
            "claims": 3,
            "rejected": 1,
            "conditions": [condition(t) for t in ("Fetched", "Applied", "WrittenBack", "Ready")],
        },
    ),
]


@pytest.fixture(scope="module")
def installed(clusters: dict[str, client.ApiClient]) -> dict[str, client.ApiClient]:
    for cluster, api in clusters.items():
        install_crds(api, load_crds(cluster=cluster))
    return clusters


def custom(namespace: TwinNamespace, cluster: str) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(namespace.clusters[cluster])


def where(obj: dict[str, Any], namespace: TwinNamespace) -> tuple[str, str, str, str]:
    group, version = obj["apiVersion"].split("/")
    return group, version, namespace.name, PLURALS[obj["kind"]]


def create(namespace: TwinNamespace, cluster: str, obj: dict[str, Any]) -> dict[str, Any]:
    return custom(namespace, cluster).create_namespaced_custom_object(*where(obj, namespace), obj)


def contains(stored: Any, sent: Any) -> bool:
    """Whether everything sent was stored; the server may add defaults."""
    if isinstance(sent, dict):
        return isinstance(stored, dict) and all(
            key in stored and contains(stored[key], value) for key, value in sent.items()
        )
    if isinstance(sent, list):
        return (
            isinstance(stored, list)
            and len(stored) == len(sent)
            and all(map(contains, stored, sent))
        )
    return stored == sent


def rejection(call: Any) -> tuple[int, str]:
    with pytest.raises(ApiException) as raised:
        call()
    return raised.value.status, json.loads(raised.value.body)["message"]


@pytest.mark.parametrize("cluster", ["app", "control-plane"])
def test_install_again_changes_nothing(
    installed: dict[str, client.ApiClient], cluster: str
) -> None:
    extensions = client.ApiextensionsV1Api(installed[cluster])
    crds = load_crds(cluster=cluster)
    names = [crd["metadata"]["name"] for crd in crds]
    before = {
        n: extensions.read_custom_resource_definition(n).metadata.resource_version for n in names
    }
    install_crds(installed[cluster], crds)
    after = {
        n: extensions.read_custom_resource_definition(n).metadata.resource_version for n in names
    }
    assert after == before
    for name in names:
        managers = extensions.read_custom_resource_definition(name).metadata.managed_fields
        assert "klutch-gitops" in {m.manager for m in managers if m.operation == "Apply"}


def throwaway_binding_crd(scope: str) -> dict[str, Any]:
    """The App Cluster's APIServiceBinding CRD under a fresh group, so the shared one stays."""
    group = f"g{uuid.uuid4().hex[:8]}.test.klutch.example"
    crd = copy.deepcopy(load_crds(cluster="app")[0])
    crd["metadata"]["name"] = f"apiservicebindings.{group}"
    crd["spec"]["group"] = group
    crd["spec"]["scope"] = scope
    return crd


def test_install_refuses_a_scope_change_with_the_migration(
    clusters: dict[str, client.ApiClient],
) -> None:
    """An APIServiceBinding CRD installed namespaced (before it became cluster-scoped like
    Klutch's) is named with the fix, not left to the apiserver's 422 on immutable spec.scope."""
    old = throwaway_binding_crd("Namespaced")
    name = old["metadata"]["name"]
    api = clusters["app"]
    install_crds(api, [old])
    try:
        with pytest.raises(KlutchError) as raised:
            install_crds(api, [{**old, "spec": {**old["spec"], "scope": "Cluster"}}])
        assert f"CRD {name} is installed with spec.scope Namespaced" in raised.value.message
        assert "needs Cluster" in raised.value.message
        assert f"kubectl delete crd {name}" in raised.value.fix
        assert "klutch-bind bind" in raised.value.fix
        live = client.ApiextensionsV1Api(api).read_custom_resource_definition(name)
        assert live.spec.scope == "Namespaced"  # nothing was applied
        live.spec.scope = "Cluster"  # what the apiserver says without the check
        status, message = rejection(
            lambda: client.ApiextensionsV1Api(api).replace_custom_resource_definition(name, live)
        )
        assert status == 422, message
        assert "spec.scope" in message
        assert "immutable" in message
    finally:
        client.ApiextensionsV1Api(api).delete_custom_resource_definition(name)


def test_install_reports_a_conflict_instead_of_forcing(
    clusters: dict[str, client.ApiClient],
) -> None:
    """A field another manager owns stays theirs; a throwaway CRD keeps the shared ones intact."""
    crd = throwaway_binding_crd("Cluster")
    api = clusters["control-plane"]
    install_crds(api, [crd], field_manager="someone-else")
    try:
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        schema["description"] = "changed by klutch-gitops"
        with pytest.raises(KlutchError, match='conflict with "someone-else"'):
            install_crds(api, [crd])
    finally:
        client.ApiextensionsV1Api(api).delete_custom_resource_definition(crd["metadata"]["name"])


@pytest.mark.parametrize(
    ("cluster", "obj", "status"), VALID, ids=[f"{o['kind']}-{o['apiVersion']}" for _, o, _ in VALID]
)
def test_valid_object_round_trips_with_status(
    installed: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    cluster: str,
    obj: dict[str, Any],
    status: dict[str, Any],
) -> None:
    api = custom(namespace, cluster)
    created = create(namespace, cluster, obj)
    name = obj["metadata"]["name"]
    api.patch_namespaced_custom_object_status(*where(obj, namespace), name, {"status": status})
    stored = api.get_namespaced_custom_object(*where(obj, namespace), name)
    assert stored["spec"] == created["spec"]
    assert contains(stored["spec"], obj["spec"])
    assert stored["status"] == status
    api.delete_namespaced_custom_object(*where(obj, namespace), name)


def test_service_binding_is_cluster_scoped_and_round_trips_with_status(
    installed: dict[str, client.ApiClient],
) -> None:
    """Cluster-scoped as Klutch's (apiservicebinding_types.go): created at the cluster path with
    the ``namespace: klutch-bind`` kubectl bind sends (servicebindings.go), which the apiserver
    drops; its kubeconfigSecretRef is immutable, as Klutch's."""
    api = client.CustomObjectsApi(installed["app"])
    where_ = ("klutch.anynines.com", "v1alpha1", "apiservicebindings")
    name = f"t{uuid.uuid4().hex[:8]}.crd-test.klutch.example"  # no export of that name exists
    ref = {"namespace": "klutch-bind", "name": "kubeconfig-abc", "key": "kubeconfig"}
    obj = {
        "apiVersion": BIND,
        "kind": "APIServiceBinding",
        "metadata": {"name": name, "namespace": "klutch-bind"},
        "spec": {
            "kubeconfigSecretRef": ref,
            "permissionClaims": [{**SECRETS_CLAIM, "state": "Accepted"}],
        },
    }
    status = {
        "providerPrettyName": "anynines",
        "conditions": [condition("SecretValid"), condition()],
    }
    created = api.create_cluster_custom_object(*where_, obj)
    try:
        assert "namespace" not in created["metadata"]
        api.patch_cluster_custom_object_status(*where_, name, {"status": status})
        stored = api.get_cluster_custom_object(*where_, name)
        assert contains(stored["spec"], obj["spec"])
        assert stored["status"] == status
        moved = {"spec": {"kubeconfigSecretRef": {**ref, "name": "kubeconfig-other"}}}
        code, message = rejection(lambda: api.patch_cluster_custom_object(*where_, name, moved))
        assert code == 422
        assert "kubeconfigSecretRef is immutable" in message
        wrong_key = {**obj, "metadata": {"name": f"x{name}"}}
        wrong_key["spec"] = {"kubeconfigSecretRef": {**ref, "key": "config"}}
        code, message = rejection(lambda: api.create_cluster_custom_object(*where_, wrong_key))
        assert code == 422
        assert "spec.kubeconfigSecretRef.key" in message
    finally:
        api.delete_cluster_custom_object(*where_, name)


def test_permission_claim_names_default_to_everything(
    installed: dict[str, client.ApiClient], namespace: TwinNamespace
) -> None:
    _, template, _ = VALID[0]
    stored = create(namespace, "control-plane", template)
    assert stored["spec"]["permissionClaims"][0]["selector"] == {
        "names": ["*"],
        "owner": "Provider",
    }


def test_export_name_must_be_plural_dot_group(
    installed: dict[str, client.ApiClient], namespace: TwinNamespace
) -> None:
    _, export, _ = VALID[3]
    wrong = {**export, "metadata": {"name": "postgresql"}}
    status, message = rejection(lambda: create(namespace, "control-plane", wrong))
    assert status == 422
    assert "APIServiceExport name must be <plural>.<group>" in message


def test_cluster_binding_must_be_named_cluster(
    installed: dict[str, client.ApiClient], namespace: TwinNamespace
) -> None:
    _, binding, _ = VALID[5]
    wrong = {**binding, "metadata": {"name": "my-cluster"}}
    status, message = rejection(lambda: create(namespace, "control-plane", wrong))
    assert status == 422
    assert "ClusterBinding must be named cluster" in message


def test_export_request_resources_are_immutable(
    installed: dict[str, client.ApiClient], namespace: TwinNamespace
) -> None:
    _, request, _ = VALID[2]
    create(namespace, "control-plane", request)
    changed = [{**request["spec"]["resources"][0], "resource": "mongodbinstances"}]
    status, message = rejection(
        lambda: custom(namespace, "control-plane").patch_namespaced_custom_object(
            *where(request, namespace),
            request["metadata"]["name"],
            {"spec": {"resources": changed}},
        )
    )
    assert status == 422
    assert "spec.resources is immutable" in message


def test_repository_binding_defaults(
    installed: dict[str, client.ApiClient], namespace: TwinNamespace
) -> None:
    spec = create(namespace, "control-plane", repository_binding())["spec"]
    assert (spec["branch"], spec["path"], spec["suspend"]) == ("main", ".", False)
    assert spec["writeBack"] == {"mode": "inline", "branch": "klutch-status"}
    assert spec["appSync"] == "reconciler"
    assert spec["appCluster"]["kubeconfigSecretRef"]["key"] == "kubeconfig"
    assert spec["controlPlane"]["kubeconfigSecretRef"]["key"] == "kubeconfig"


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com:8443/team/app.git",
        "ssh://git@git.example.com:2222/team/app.git",
        "git@github.com:team/app.git",
        "git@git.example.com:/srv/git/app.git",
    ],
)
def test_repository_binding_accepts_url(
    installed: dict[str, client.ApiClient], namespace: TwinNamespace, url: str
) -> None:
    assert create(namespace, "control-plane", repository_binding(url=url))["spec"]["url"] == url


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"url": "http://git.example.com/app.git"}, "spec.url"),
        ({"url": "https://user:token@git.example.com/app.git"}, "spec.url"),
        ({"url": "ssh://-oProxyCommand=touch%20x/app.git"}, "spec.url"),
        ({"url": "app.git"}, "spec.url"),
        # Tenants never get local repositories (another tenant's, or /etc), nor git's remote
        # helpers (ext:: runs a command), nor a user, host or path that ssh takes as an option.
        ({"url": "file:///srv/git/other-team.git"}, "spec.url"),
        ({"url": "file:///etc"}, "spec.url"),
        ({"url": "ext::sh -c touch% /tmp/pwned"}, "spec.url"),
        ({"url": "ssh://-oProxyCommand=x@git.example.com/app.git"}, "spec.url"),
        ({"url": "git@git.example.com:-oProxyCommand=x"}, "spec.url"),
        ({"url": "git@file:///etc"}, "spec.url"),
        ({"writeBack": {"mode": "pull-request"}}, "spec.writeBack.mode"),
        ({"writeBack": {"mode": "branch", "branch": "main"}}, "writeBack.branch must differ"),
        ({"branch": "--upload-pack=x"}, "spec.branch"),
        ({"branch": "main..other"}, "git check-ref-format"),
        ({"branch": "team/.hidden"}, "git check-ref-format"),
        ({"branch": "main.lock"}, "git check-ref-format"),
        ({"branch": "HEAD"}, "git check-ref-format"),
        ({"writeBack": {"mode": "files", "branch": "status//x"}}, "git check-ref-format"),
        ({"path": "../other-team"}, "must not contain '..'"),
        ({"path": "/etc"}, "spec.path"),
        ({"path": "-claims"}, "spec.path"),
        ({"path": "claims/.git/hooks"}, "must not name the .git folder"),
        ({"appNamespaces": []}, "spec.appNamespaces"),
        ({"pollInterval": "soon"}, "spec.pollInterval"),
        ({"appSync": "argocd"}, "spec.appSync"),
    ],
    ids=lambda value: json.dumps(value) if isinstance(value, dict) else None,
)
def test_repository_binding_rejects(
    installed: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    spec: dict[str, Any],
    expected: str,
) -> None:
    status, message = rejection(
        lambda: create(namespace, "control-plane", repository_binding(**spec))
    )
    assert status == 422
    assert expected in message


def test_repository_binding_printer_columns(
    installed: dict[str, client.ApiClient], namespace: TwinNamespace
) -> None:
    create(namespace, "control-plane", repository_binding())
    table = custom(namespace, "control-plane").list_namespaced_custom_object(
        *where(repository_binding(), namespace),
        _headers={"Accept": "application/json;as=Table;g=meta.k8s.io;v=v1"},
    )
    shown = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert shown == ["Name", "URL", "Branch", "Ready", "Age"]
    assert table["rows"][0]["cells"][:3] == [
        "app-repo",
        "https://git.example.com/team/app.git",
        "main",
    ]
