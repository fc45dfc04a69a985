"""The pure half of bindings: which template answers a request, and the objects a binding makes."""

from __future__ import annotations

import base64

import pytest

from bind_api.bindings import (
    BINDER_SECRET,
    Repository,
    match_templates,
    repository_binding_name,
    repository_objects,
)
from bind_api.export_requests import export_request
from bind_api.ownership import Refused, check_limit, check_owner, owned_by
from klutch_gitops.apis import IDENTITY_ANNOTATION, mapped_namespace
from klutch_gitops.consumer import (
    consumer_namespace,
    identity_of,
    legacy_consumer_namespace,
    owner_of,
)
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import FAILED, SUCCEEDED, export_object, missing_crd, request_status

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


LEGACY_CONSUMER = "cluster-0123456789"
CONSUMER = consumer_namespace("alice", "app-1")


def test_repository_binding_name_is_stable_short_and_path_specific() -> None:
    url = "https://git.example.com/Team/Orders_Service.git"
    name = repository_binding_name(url, "claims", LEGACY_CONSUMER)
    assert name == repository_binding_name(url, "claims", LEGACY_CONSUMER)
    assert name.startswith("orders-service-")
    assert name != repository_binding_name(url, "other", LEGACY_CONSUMER)
    long = repository_binding_name("git@host:" + "x" * 200, ".", LEGACY_CONSUMER)
    assert len(long) <= 40
    assert long[0] != "-"


@pytest.mark.parametrize("consumer", [LEGACY_CONSUMER, CONSUMER])
def test_a_registration_name_keeps_the_hash_within_63(consumer: str) -> None:
    """The reconciler names a registration ``<namespace>.<binding>``[:63]; the hash must survive."""
    for url in ("git@host:" + "x" * 200, "https://git.example.com/team/" + "y" * 80):
        name = repository_binding_name(url, "claims", consumer)
        assert len(f"{consumer}.{name}") <= 63
        assert name != repository_binding_name(url, "other", consumer)


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


def namespace(name: str, identity: str | None, **meta: str) -> dict:
    annotations = {IDENTITY_ANNOTATION: identity} if identity is not None else {}
    return {"metadata": {"name": name, "annotations": annotations, **meta}}


def test_consumer_names_carry_130_bits_and_leave_room_for_app_namespaces() -> None:
    name = consumer_namespace("alice", "app-1")
    suffix = name.removeprefix("cluster-")
    assert len(suffix) == 26
    assert set(suffix) <= set("abcdefghijklmnopqrstuvwxyz234567")
    assert name == consumer_namespace("alice", "app-1")
    assert name != consumer_namespace("alice", "app-2")
    assert len(legacy_consumer_namespace("alice", "app-1")) == len("cluster-") + 10
    mapped = mapped_namespace(name, "a" * 63)
    assert len(mapped) <= 63
    assert mapped.startswith(name)


def test_the_identity_splits_at_the_last_hash() -> None:
    assert owner_of(identity_of("CiQ#weird", "app-1")) == ("CiQ#weird", "app-1")


def test_an_existing_namespace_must_be_exactly_this_identitys() -> None:
    mine = identity_of("alice", "app-1")
    check_owner("cluster-x", None, mine)
    check_owner("cluster-x", namespace("cluster-x", mine), mine)
    for other in (identity_of("mallory", "app-1"), f"{mine}x", identity_of("alice", "app-2"), None):
        with pytest.raises(Refused) as refused:
            check_owner("cluster-x", namespace("cluster-x", other), mine)
        assert refused.value.status == 409
        assert "namespace cluster-x already exists" in refused.value.message
        assert "does not belong to this identity" in refused.value.message
    with pytest.raises(Refused, match="being deleted") as leaving:
        check_owner("cluster-x", namespace("cluster-x", mine, deletionTimestamp="now"), mine)
    assert leaving.value.status == 409


def test_ownership_is_by_exact_subject_not_prefix() -> None:
    namespaces = [
        namespace("a", identity_of("alice", "app-1")),
        namespace("b", identity_of("alice#evil", "app-1")),
        namespace("c", "alice#"),
        namespace("d", None),
        namespace("e", identity_of("alice", "app-2")),
    ]
    assert [n["metadata"]["name"] for n in owned_by(namespaces, "alice")] == ["a", "c", "e"]
    assert [n["metadata"]["name"] for n in owned_by(namespaces, "alice#evil")] == ["b"]


def test_the_binding_limit_names_itself_and_the_fix() -> None:
    check_limit(2, 3)
    check_limit(100, None)
    with pytest.raises(Refused) as refused:
        check_limit(3, 3)
    assert refused.value.status == 429
    assert "already has 3 bindings, the limit is 3" in refused.value.message
    assert "klutch-bind unbind" in refused.value.fix
