"""The local provider's namespaced flavour (Crossplane 2's ``.m.`` group), as pure functions.

Field names and defaults are those of crossplane/crossplane apis/v2 core/v2/resource_namespace.go
(ManagedResourceSpec) and resource.go (ProviderConfigReference, LocalSecretReference).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from klutch_local.provider import api, crds, database
from klutch_local.provider.server import secret_ref, server_from

pytestmark = pytest.mark.unit


def mr(namespace: str | None = "team-a", name: str = "orders", **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "uid": "u1"}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": api.API_VERSION,
        "kind": "LocalDatabase",
        "metadata": metadata,
        "spec": spec,
    }


def test_the_committed_namespaced_crds_are_generated_from_the_cluster_ones() -> None:
    committed = {p.name: p.read_text() for p in api.NAMESPACED_CRD_DIR.glob("*.yaml")}
    generated = {name: crds.render(crd) for name, crd in crds.generate().items()}
    assert committed == generated, "run: python -m klutch_local.provider.crds"


def test_namespaced_crds_follow_crossplane_2() -> None:
    found = {crd["spec"]["names"]["kind"]: crd for crd in api.load_crds(api.NAMESPACED_CRD_DIR)}
    assert set(found) == {
        "ClusterProviderConfig",
        "ProviderConfig",
        "LocalDatabase",
        "LocalUser",
        "LocalBackup",
        "LocalRestore",
    }
    for kind, crd in found.items():
        assert crd["spec"]["group"] == api.M_GROUP
        cluster = kind == "ClusterProviderConfig"
        assert crd["spec"]["scope"] == ("Cluster" if cluster else "Namespaced"), kind
        if kind.endswith("ProviderConfig"):
            continue
        spec = crds.spec_schema(crd)["properties"]
        assert "deletionPolicy" not in spec, kind
        assert spec["managementPolicies"]["default"] == ["*"]
        assert spec["providerConfigRef"]["default"] == {
            "kind": "ClusterProviderConfig",
            "name": "default",
        }
    user = crds.spec_schema(found["LocalUser"])
    assert user["properties"]["writeConnectionSecretToRef"]["required"] == ["name"]
    assert list(user["properties"]["writeConnectionSecretToRef"]["properties"]) == ["name"]
    local = crds.spec_schema(found["ProviderConfig"])["properties"]
    assert "backupStore" not in local
    assert list(local["credentials"]["properties"]["connectionSecretRef"]["properties"]) == ["name"]


def test_a_namespaced_resource_refers_to_namespaced_kinds() -> None:
    assert api.in_flavour_of(api.DATABASES, mr()) == api.namespaced(api.DATABASES)
    assert api.namespaced(api.DATABASES).path("team-a", "orders") == (
        f"/apis/{api.M_GROUP}/v1alpha1/namespaces/team-a/localdatabases/orders"
    )
    assert api.in_flavour_of(api.DATABASES, mr(None)) == api.DATABASES


def test_provider_config_refs_by_scope_and_kind() -> None:
    assert api.provider_config_ref(mr(None)) == api.ProviderConfigRef(
        api.PROVIDER_CONFIGS, None, "default"
    )
    assert api.provider_config_ref(mr()) == api.ProviderConfigRef(
        api.CLUSTER_PROVIDER_CONFIGS, None, "default"
    )
    local = mr(providerConfigRef={"kind": "ProviderConfig", "name": "mine"})
    ref = api.provider_config_ref(local)
    assert ref == api.ProviderConfigRef(api.NS_PROVIDER_CONFIGS, "team-a", "mine")
    assert str(ref) == "ProviderConfig team-a/mine"


def test_connection_secrets_of_namespaced_resources_stay_in_their_namespace() -> None:
    ref = {"name": "creds", "namespace": "elsewhere"}
    assert api.connection_secret_ref(mr(writeConnectionSecretToRef=ref)) == ("team-a", "creds")
    assert api.connection_secret_ref(mr(None, writeConnectionSecretToRef=ref)) == (
        "elsewhere",
        "creds",
    )
    assert api.connection_secret_ref(mr(None, writeConnectionSecretToRef={"name": "x"})) is None


@pytest.mark.parametrize(
    ("policies", "create", "update", "orphan"),
    [
        (None, True, True, False),
        (["*"], True, True, False),
        (["Observe", "Create", "Update", "LateInitialize"], True, True, True),
        (["Observe"], False, False, True),
        (["Observe", "Delete"], False, False, False),
    ],
)
def test_management_policies(
    policies: list[str] | None, create: bool, update: bool, orphan: bool
) -> None:
    obj = mr(managementPolicies=policies) if policies else mr()
    assert (api.allows(obj, "Create"), api.allows(obj, "Update")) == (create, update)
    assert api.orphans(obj) is orphan
    assert api.orphans(mr(None, deletionPolicy="Orphan"))


def test_namespaces_mark_their_roles_apart() -> None:
    """The same database name composed in two namespaces: the second is a conflict."""
    mine = api.marker("LocalDatabase", api.identity(mr("team-a")))
    assert mine == "managed by klutch-gitops local-provider: LocalDatabase/team-a/orders"
    owner = database.Role("shop_owner", mine)
    other = database.conflict("shop", api.identity(mr("team-b")), owner, None)
    assert "was not made for LocalDatabase team-b/orders" in other
    assert database.conflict("shop", api.identity(mr("team-a")), owner, None) == ""
    cluster = database.conflict("shop", api.identity(mr(None)), owner, None)
    assert "was not made for LocalDatabase orders" in cluster


def test_a_namespaced_provider_config_reads_a_secret_of_its_own_namespace() -> None:
    config = {
        "metadata": {"name": "mine", "namespace": "team-a"},
        "spec": {
            "credentials": {"connectionSecretRef": {"name": "pg", "namespace": "kube-system"}},
            "backupStore": {"path": "/etc"},
        },
    }
    assert secret_ref(config) == ("team-a", "pg")
    values = {"endpoint": "aDE=", "port": "NTQzMg==", "username": "dQ==", "password": "cA=="}
    server = server_from("team-a/mine", config, {"data": values}, Path("/b"), Path("/bin"))
    assert server.backup_dir == Path("/b")  # never a path the namespace chose
    cluster = {"metadata": {"name": "pg"}, "spec": config["spec"]}
    assert secret_ref(cluster) == ("kube-system", "pg")
