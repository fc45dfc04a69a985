"""The namespaced-XR flavour: its composers, and the XRDs and Compositions that use them.

An observed namespaced XR is what Crossplane 2 sends a function: the XR with its namespace, and
the composed resources get their namespace and name from Crossplane
(crossplane/crossplane internal/controller/apiextensions/composite/composition_render.go).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from klutch_local.function import namespaced
from klutch_local.function.composers import CompositionError
from klutch_local.provider import api

pytestmark = pytest.mark.unit

CATALOG = Path(__file__).resolve().parents[4] / "catalog" / "namespaced"


def documents(folder: str) -> list[dict[str, Any]]:
    return [
        doc
        for path in sorted((CATALOG / folder).glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def xr(kind: str, name: str, namespace: str | None = "team-a", **spec: Any) -> dict[str, Any]:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {})}
    return {
        "apiVersion": "data.local.klutch.anynines.com/v1alpha1",
        "kind": kind,
        "metadata": metadata,
        "spec": spec,
    }


def test_an_instance_is_one_namespaced_database_named_for_its_namespace() -> None:
    instance = xr(
        "PostgresqlInstance",
        "orders",
        plan="postgresql-single-medium",
        parameters={"statementTimeout": 30000, "workMem": "4MB"},
    )
    assert namespaced.postgresql(instance, {}) == {
        "database": {
            "apiVersion": "postgresql.m.local.klutch.anynines.com/v1alpha1",
            "kind": "LocalDatabase",
            "metadata": {"annotations": {api.EXTERNAL_NAME: "team-a-orders"}},
            "spec": {
                "providerConfigRef": {"kind": "ClusterProviderConfig", "name": "local-postgresql"},
                "forProvider": {
                    "connectionLimit": 50,
                    "statementTimeout": 30000,
                    "workMem": "4MB",
                },
            },
        }
    }


@pytest.mark.parametrize(
    ("spec", "limit"),
    [
        ({}, 10),
        ({"plan": "x-big"}, 100),
        ({"plan": "x-nano", "parameters": {"maxConnections": 3}}, 3),
    ],
)
def test_the_plan_sets_the_connection_limit(spec: dict[str, Any], limit: int) -> None:
    composed = namespaced.postgresql(xr("PostgresqlInstance", "db", **spec), {})
    assert composed["database"]["spec"]["forProvider"]["connectionLimit"] == limit


def test_a_binding_is_an_owner_user_writing_into_its_namespace() -> None:
    composed = namespaced.binding(xr("ServiceBinding", "app", instanceRef="orders"), {})
    user = composed["user"]
    assert user["apiVersion"] == "postgresql.m.local.klutch.anynines.com/v1alpha1"
    assert user["metadata"]["annotations"][api.EXTERNAL_NAME] == "team-a-app"
    assert user["spec"]["forProvider"] == {"database": "team-a-orders", "privileges": ["Owner"]}
    assert user["spec"]["writeConnectionSecretToRef"] == {"name": "app-creds"}
    named = namespaced.binding(
        xr("ServiceBinding", "app", instanceRef="orders", secretName="pg"), {}
    )
    assert named["user"]["spec"]["writeConnectionSecretToRef"] == {"name": "pg"}


def test_a_backup_dumps_the_instance_and_a_restore_reads_the_dump() -> None:
    (dump,) = namespaced.backup(xr("Backup", "nightly", instanceRef="orders"), {}).values()
    assert dump["kind"] == "LocalBackup"
    assert dump["metadata"]["annotations"][api.EXTERNAL_NAME] == "nightly"  # <store>/team-a/
    assert dump["spec"]["forProvider"] == {"database": "team-a-orders"}
    restore = xr("Restore", "back", backupRef="nightly", instanceRef="orders")
    (local,) = namespaced.restore(restore, {}).values()
    assert local["kind"] == "LocalRestore"
    assert local["spec"]["forProvider"] == {"backup": "nightly", "database": "team-a-orders"}


@pytest.mark.parametrize(
    ("composer", "obj", "message"),
    [
        (namespaced.binding, xr("ServiceBinding", "app"), "spec.instanceRef is missing"),
        (namespaced.restore, xr("Restore", "r", instanceRef="db"), "spec.backupRef is missing"),
        (namespaced.postgresql, xr("PostgresqlInstance", "db", None), "has no namespace"),
        (namespaced.postgresql, xr("PostgresqlInstance", "db", plan="huge1"), "spec.plan"),
    ],
)
def test_what_cannot_be_composed_is_named(composer: Any, obj: dict[str, Any], message: str) -> None:
    with pytest.raises(CompositionError, match=message):
        composer(obj, {})


def test_the_xrds_are_crossplane_2_namespaced_without_claims() -> None:
    xrds = documents("xrds")
    assert {x["spec"]["names"]["kind"] for x in xrds} == {
        "PostgresqlInstance",
        "ServiceBinding",
        "Backup",
        "Restore",
    }
    for xrd in xrds:
        assert xrd["apiVersion"] == "apiextensions.crossplane.io/v2"
        assert xrd["spec"]["scope"] == "Namespaced"
        assert "claimNames" not in xrd["spec"]
        names = xrd["spec"]["names"]
        assert xrd["metadata"]["name"] == f"{names['plural']}.{xrd['spec']['group']}"


def test_each_composition_names_a_composer_for_its_xrd() -> None:
    xrds = {x["spec"]["names"]["kind"]: x for x in documents("xrds")}
    compositions = documents("compositions")
    assert {c["metadata"]["name"] for c in compositions} == {
        x["spec"]["defaultCompositionRef"]["name"] for x in xrds.values()
    }
    for composition in compositions:
        kind = composition["spec"]["compositeTypeRef"]["kind"]
        (version,) = xrds[kind]["spec"]["versions"]
        assert composition["spec"]["compositeTypeRef"]["apiVersion"] == (
            f"{xrds[kind]['spec']['group']}/{version['name']}"
        )
        (step,) = composition["spec"]["pipeline"]
        assert step["functionRef"] == {"name": "function-klutch-local"}
        assert step["input"]["compose"] in namespaced.COMPOSERS


def test_the_example_composes() -> None:
    """The example's objects, as Crossplane would observe them in a namespace."""
    xrds = {x["spec"]["names"]["kind"]: x for x in documents("xrds")}
    by_kind = {
        "PostgresqlInstance": namespaced.COMPOSERS["namespaced-postgresql"],
        "ServiceBinding": namespaced.COMPOSERS["namespaced-servicebinding"],
        "Backup": namespaced.COMPOSERS["namespaced-backup"],
        "Restore": namespaced.COMPOSERS["namespaced-restore"],
    }
    for example in documents("examples"):
        assert example["kind"] in xrds
        fields = xrds[example["kind"]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert set(example["spec"]) <= set(fields["properties"]["spec"]["properties"])
        observed = {**example, "metadata": {**example["metadata"], "namespace": "shop"}}
        assert by_kind[example["kind"]](observed, {})
