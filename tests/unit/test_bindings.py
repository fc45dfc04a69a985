"""The pure half of bindings: which template answers a request, and the objects a binding makes."""

from __future__ import annotations

import base64

import pytest

from bind_api.bindings import (
    BINDER_SECRET,
    FAILED,
    SUCCEEDED,
    Repository,
    export_object,
    export_request,
    match_templates,
    missing_crd,
    repository_binding_name,
    repository_objects,
    request_status,
)
from klutch_gitops.errors import KlutchError

SECRETS_CLAIM = {"group": "", "resource": "secrets", "selector": {"owner": "Provider"}}
CRD = {
    "metadata": {"name": "postgresqlinstances.anynines.com"},
    "spec": {
        "group": "anynines.com",
        "names": {"plural": "postgresqlinstances", "kind": "PostgresqlInstance"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object"}},
                "deprecated": False,
            }
        ],
    },
}


def template(group: str, resource: str, namespace: str = "crossplane-system", **extra) -> dict:
    return {
        "apiVersion": f"{group}/v1alpha1",
        "kind": "APIServiceExportTemplate",
        "metadata": {"name": f"{resource}-template", "namespace": namespace},
        "spec": {"APIServiceSelector": {"group": "anynines.com", "resource": resource}, **extra},
    }


def decoded(secret: dict) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def test_templates_of_both_groups_are_matched_by_resource_and_group() -> None:
    klutch = template("example-backend.klutch.anynines.com", "postgresqlinstances")
    ours = template("klutch.anynines.com", "servicebindings")
    found = match_templates([ours, klutch], ["postgresqlinstances.anynines.com"])
    assert found == {"postgresqlinstances.anynines.com": klutch}


def test_the_same_template_wins_whatever_the_listing_order() -> None:
    first = template("klutch.anynines.com", "backups", namespace="a")
    second = template("klutch.anynines.com", "backups", namespace="b")
    for order in ([first, second], [second, first]):
        assert match_templates(order, ["backups.anynines.com"])["backups.anynines.com"] is first


def test_an_api_without_template_names_it_and_what_is_offered() -> None:
    offered = [template("klutch.anynines.com", "postgresqlinstances")]
    with pytest.raises(KlutchError) as error:
        match_templates(offered, ["mongodbinstances.anynines.com"])
    assert "mongodbinstances.anynines.com" in error.value.message
    assert "offered: postgresqlinstances.anynines.com" in error.value.message


def test_export_request_carries_versions_and_claims_from_the_template() -> None:
    body = template("example-backend.klutch.anynines.com", "postgresqlinstances")
    body["spec"]["APIServiceSelector"]["version"] = "v1"
    body["spec"]["permissionClaims"] = [SECRETS_CLAIM]
    request = export_request("cluster-abc", body)
    assert request["metadata"] == {
        "name": "postgresqlinstances.anynines.com",
        "namespace": "cluster-abc",
    }
    assert request["spec"]["resources"] == [
        {
            "group": "anynines.com",
            "resource": "postgresqlinstances",
            "versions": ["v1"],
            "permissionClaims": [SECRETS_CLAIM],
        }
    ]
    unversioned = export_request("cluster-abc", template("klutch.anynines.com", "backups"))
    assert unversioned["spec"]["resources"][0]["versions"] == []
    assert unversioned["spec"]["resources"][0]["permissionClaims"] == []


def test_export_is_the_crd_snapshot_with_the_templates_claims() -> None:
    body = template("klutch.anynines.com", "postgresqlinstances", permissionClaims=[SECRETS_CLAIM])
    export = export_object("cluster-abc", body, CRD)
    assert export["metadata"]["name"] == "postgresqlinstances.anynines.com"
    assert export["spec"]["group"] == "anynines.com"
    assert export["spec"]["names"] == CRD["spec"]["names"]
    assert export["spec"]["versions"] == [
        {k: v for k, v in CRD["spec"]["versions"][0].items() if k != "deprecated"}
    ]
    assert export["spec"]["permissionClaims"] == [SECRETS_CLAIM]
    again = export_object("cluster-abc", body, CRD)["metadata"]["annotations"]
    assert again == export["metadata"]["annotations"]


def test_missing_crd_and_unserved_version_are_terminal_problems() -> None:
    body = template("klutch.anynines.com", "postgresqlinstances")
    assert missing_crd(body, CRD) is None
    assert "postgresqlinstances.anynines.com does not exist" in (missing_crd(body, None) or "")
    body["spec"]["APIServiceSelector"]["version"] = "v2"
    assert "does not serve v2" in (missing_crd(body, CRD) or "")


def test_request_status_phases() -> None:
    ok = request_status("a.b", "ns", None, "2026-01-01T00:00:00Z")["status"]
    assert ok["phase"] == SUCCEEDED
    assert "terminalMessage" not in ok
    failed = request_status("a.b", "ns", "CRD a.b is gone", "2026-01-01T00:00:00Z")["status"]
    assert failed["phase"] == FAILED
    assert failed["terminalMessage"] == "CRD a.b is gone"
    assert {c["type"]: c["status"] for c in failed["conditions"]} == {
        "ExportsReady": "False",
        "Ready": "False",
    }


def test_repository_binding_name_is_stable_short_and_path_specific() -> None:
    url = "https://git.example.com/Team/Orders_Service.git"
    name = repository_binding_name(url, "claims")
    assert name == repository_binding_name(url, "claims")
    assert name.startswith("orders-service-")
    assert name != repository_binding_name(url, "other")
    long = repository_binding_name("git@host:" + "x" * 200, ".")
    assert len(long) <= 40
    assert long[0] != "-"


def test_repository_objects_reference_their_secrets() -> None:
    repository = Repository(
        url="https://git.example.com/team/orders.git",
        app_namespaces=("team-a",),
        path="claims",
        username="bot",
        password="hunter2",
    )
    objects = repository_objects("cluster-abc", repository, "app: kubeconfig\n")
    secrets = {body["metadata"]["name"]: body for _, body in objects if body["kind"] == "Secret"}
    binding = objects[-1][1]
    name = binding["metadata"]["name"]
    assert binding["kind"] == "RepositoryBinding"
    assert binding["metadata"]["namespace"] == "cluster-abc"
    assert binding["spec"] == {
        "url": "https://git.example.com/team/orders.git",
        "branch": "main",
        "path": "claims",
        "appNamespaces": ["team-a"],
        "appCluster": {"kubeconfigSecretRef": {"name": f"{name}-app-kubeconfig"}},
        "controlPlane": {"kubeconfigSecretRef": {"name": BINDER_SECRET}},
        "credentialsSecretRef": {"name": f"{name}-git"},
    }
    assert decoded(secrets[f"{name}-app-kubeconfig"]) == {"kubeconfig": "app: kubeconfig\n"}
    assert decoded(secrets[f"{name}-git"]) == {"username": "bot", "password": "hunter2"}
    assert "hunter2" not in str(binding)


def test_without_credentials_there_is_no_git_secret() -> None:
    repository = Repository(url="file:///srv/orders.git", app_namespaces=("team-a",))
    objects = repository_objects("cluster-abc", repository, "k")
    assert [body["kind"] for _, body in objects] == ["Secret", "RepositoryBinding"]
    assert "credentialsSecretRef" not in objects[-1][1]["spec"]


def test_ssh_credentials_use_the_reconcilers_keys() -> None:
    repository = Repository(
        url="git@host:team/orders.git",
        app_namespaces=("team-a",),
        ssh_private_key="-----BEGIN KEY-----",
        known_hosts="host ssh-ed25519 AAAA",
    )
    git_secret = repository_objects("ns", repository, "k")[1][1]
    assert decoded(git_secret) == {
        "ssh-privatekey": "-----BEGIN KEY-----",
        "known_hosts": "host ssh-ed25519 AAAA",
    }
    assert "BEGIN KEY" not in repr(repository)
