"""function-klutch-local's composers and serving layer against the Resources-mode Compositions
they replace (catalog/compositions/local/*.yaml before commit e32e23c, `git show
e32e23c~1:catalog/compositions/local/local-postgresql.yaml`): each expected manifest below is
what those patches produced, value for value.

Requests are built as Crossplane builds them (crossplane internal/controller/apiextensions/
composite/composition_functions.go ``AsState``: the observed XR, observed composed resources by
composition resource name with their connection details); a desired resource counts as ready
only when the function says READY_TRUE (same file, ``Ready: dr.GetReady() == READY_TRUE``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from klutch_local.function import composers, registry
from klutch_local.function.composers import CompositionError
from klutch_local.function.registry import compose
from klutch_local.function.server import run

pytestmark = pytest.mark.unit

LOCAL = Path(__file__).resolve().parents[4] / "catalog" / "compositions" / "local"
API = "postgresql.local.klutch.anynines.com/v1alpha1"
PROVIDER = {"providerConfigRef": {"name": "local-postgresql"}}
A9S_KEYS = ("host", "hosts", "name", "password", "port", "uri", "username")


def xr(kind: str, claim: str = "orders", namespace: str = "team-a", **spec: Any) -> dict:
    labels = {"crossplane.io/claim-name": claim, "crossplane.io/claim-namespace": namespace}
    return {
        "apiVersion": "anynines.com/v1",
        "kind": kind,
        "metadata": {"name": f"{claim}-x7k2p", "labels": labels},
        "spec": spec,
    }


def step_input(name: str) -> dict:
    """The input of the local Composition named ``local-<name>``."""
    composition = yaml.safe_load((LOCAL / f"local-{name}.yaml").read_text())
    assert composition["spec"]["mode"] == "Pipeline"
    (step,) = composition["spec"]["pipeline"]
    assert step["functionRef"] == {"name": "function-klutch-local"}
    return step["input"]


def managed(kind: str, for_provider: dict, external_name: str | None, **spec: Any) -> dict:
    manifest: dict[str, Any] = {
        "apiVersion": API,
        "kind": kind,
        "spec": {"forProvider": for_provider, **PROVIDER, **spec},
    }
    if external_name:
        manifest["metadata"] = {"annotations": {"crossplane.io/external-name": external_name}}
    return manifest


@pytest.mark.parametrize(
    ("plan", "limit"),
    [
        ("postgresql-single-nano", 10),
        ("postgresql-single-small", 25),
        ("postgresql-replica-medium", 50),
        ("postgresql-single-big", 100),
    ],
)
def test_the_plans_size_sets_the_connection_limit(plan: str, limit: int) -> None:
    composite = xr("XPostgresqlInstance", service="a9s-postgresql14", plan=plan)
    assert compose(composite, step_input("postgresql")) == {
        "database": managed(
            "LocalDatabase", {"connectionLimit": limit}, "team-a-orders", deletionPolicy="Delete"
        )
    }


def test_parameters_reach_the_database_and_max_connections_wins_over_the_plan() -> None:
    parameters = {
        "maxConnections": 30.0,  # a number in a protobuf Struct is a double
        "statementTimeout": 60000,
        "tempFileLimit": -1,
        "idleInTransactionSessionTimeout": 1000,
        "workMem": "8MB",
        "unrelated": "ignored",
    }
    composite = xr("XPostgresqlInstance", plan="postgresql-single-small", parameters=parameters)
    (database,) = compose(composite, step_input("postgresql")).values()
    assert database["spec"]["forProvider"] == {
        "connectionLimit": 30,
        "statementTimeout": 60000,
        "tempFileLimit": -1,
        "idleInTransactionSessionTimeout": 1000,
        "workMem": "8MB",
    }
    assert isinstance(database["spec"]["forProvider"]["connectionLimit"], int)


def test_a_plan_without_a_known_size_is_refused_naming_it() -> None:
    composite = xr("XPostgresqlInstance", plan="postgresql-single-huge")
    with pytest.raises(CompositionError, match=r"spec.plan 'postgresql-single-huge'.*nano"):
        compose(composite, step_input("postgresql"))


def test_a_binding_is_a_user_owning_the_instances_database_with_a9s_credentials() -> None:
    composite = xr("XServiceBinding", claim="orders-app", instanceRef="orders")
    user = managed("LocalUser", {"privileges": ["Owner"], "database": "team-a-orders"}, None)
    user["metadata"] = {"annotations": {"crossplane.io/external-name": "team-a-orders-app"}}
    user["spec"]["writeConnectionSecretToRef"] = {
        "namespace": "team-a",
        "name": "orders-app-creds",
    }
    assert compose(composite, step_input("servicebinding")) == {"user": user}


def test_backup_and_restore_find_the_database_and_backup_by_the_claims_names() -> None:
    backup = xr("XBackup", claim="nightly", instanceRef="orders")
    assert compose(backup, step_input("backup")) == {
        "backup": managed(
            "LocalBackup", {"database": "team-a-orders"}, "team-a-nightly", deletionPolicy="Delete"
        )
    }
    restore = xr("XRestore", claim="undo", instanceRef="orders", backupRef="nightly")
    assert compose(restore, step_input("restore")) == {
        "restore": managed(
            "LocalRestore",
            {"backup": "team-a-nightly", "database": "team-a-orders"},
            None,
            deletionPolicy="Delete",
        )
    }


@pytest.mark.parametrize(
    ("name", "composite", "missing"),
    [
        ("postgresql", {**xr("XPostgresqlInstance"), "metadata": {"name": "bare"}}, "labels"),
        ("servicebinding", xr("XServiceBinding"), "spec.instanceRef"),
        ("restore", xr("XRestore", instanceRef="orders"), "spec.backupRef"),
    ],
)
def test_what_a_required_patch_needed_is_named_when_missing(
    name: str, composite: dict, missing: str
) -> None:
    with pytest.raises(CompositionError, match=missing):
        compose(composite, step_input(name))


def test_an_unknown_composer_is_refused_with_the_known_ones() -> None:
    with pytest.raises(CompositionError, match=r"compose: 'nope'.*backup, .*postgresql"):
        compose(xr("XPostgresqlInstance"), {"compose": "nope"})


def test_template_copies_composite_fields_onto_its_base() -> None:
    step = {
        "compose": "template",
        "resource": {"name": "role", "base": {"kind": "ClusterRole", "metadata": {}}},
        "fields": {"metadata.annotations.size": "spec.size", "metadata.labels.x": "spec.none"},
    }
    desired = compose(xr("XWidget", size="large"), step)
    assert desired == {
        "role": {"kind": "ClusterRole", "metadata": {"annotations": {"size": "large"}}}
    }
    assert step["resource"]["base"] == {"kind": "ClusterRole", "metadata": {}}  # not mutated


def test_the_namespaced_flavours_composers_are_registered() -> None:
    assert {"namespaced-postgresql", "namespaced-servicebinding"} <= set(registry.COMPOSERS)
    assert set(composers.COMPOSERS) <= set(registry.COMPOSERS)


def request(composite: dict, step: dict, observed: dict[str, tuple[dict, dict]]) -> Any:
    req = fnv1.RunFunctionRequest()
    resource.update(req.observed.composite, composite)
    req.input.update(step)
    for name, (manifest, details) in observed.items():
        resource.update(req.observed.resources[name], manifest)
        for key, value in details.items():
            req.observed.resources[name].connection_details[key] = value
    return req


def test_readiness_follows_the_composed_resources_ready_condition() -> None:
    composite = xr("XPostgresqlInstance", plan="postgresql-single-small")
    step = step_input("postgresql")
    assert run(request(composite, step, {})).desired.resources["database"].ready == (
        fnv1.Ready.READY_FALSE
    )
    synced_only = {"status": {"conditions": [{"type": "Synced", "status": "True"}]}}
    assert (
        run(request(composite, step, {"database": (synced_only, {})}))
        .desired.resources["database"]
        .ready
        == fnv1.Ready.READY_FALSE
    )
    ready = {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    rsp = run(request(composite, step, {"database": (ready, {})}))
    assert rsp.desired.resources["database"].ready == fnv1.Ready.READY_TRUE
    desired = resource.struct_to_dict(rsp.desired.resources["database"].resource)
    assert desired["spec"]["forProvider"] == {"connectionLimit": 25}


def test_a_binding_passes_the_a9s_keys_of_its_user_on_as_connection_details() -> None:
    composite = xr("XServiceBinding", claim="orders-app", instanceRef="orders")
    assert step_input("servicebinding")["connectionDetails"]["keys"] == list(A9S_KEYS)
    details = {key: key.encode() for key in A9S_KEYS} | {"extra": b"no"}
    rsp = run(request(composite, step_input("servicebinding"), {"user": ({}, details)}))
    assert dict(rsp.desired.composite.connection_details) == {key: key.encode() for key in A9S_KEYS}


def test_a_composite_that_cannot_be_composed_is_a_fatal_result() -> None:
    rsp = run(request(xr("XServiceBinding"), step_input("servicebinding"), {}))
    assert [r.severity for r in rsp.results] == [fnv1.Severity.SEVERITY_FATAL]
    assert "spec.instanceRef" in rsp.results[0].message
    assert list(rsp.desired.resources) == []


def test_readiness_check_none_is_ready_once_the_resource_exists() -> None:
    step = {
        "compose": "template",
        "resource": {"name": "role", "base": {"kind": "ClusterRole"}},
        "readinessCheck": "None",
    }
    composite = xr("XWidget")
    assert run(request(composite, step, {})).desired.resources["role"].ready == (
        fnv1.Ready.READY_FALSE
    )
    rsp = run(request(composite, step, {"role": ({"kind": "ClusterRole"}, {})}))
    assert rsp.desired.resources["role"].ready == fnv1.Ready.READY_TRUE
    rsp = run(request(composite, {**step, "readinessCheck": "Sometimes"}, {}))
    assert "readinessCheck 'Sometimes'" in rsp.results[0].message


def test_fixed_connection_details_are_passed_as_given() -> None:
    step = {
        "compose": "template",
        "resource": {"name": "role", "base": {"kind": "ClusterRole"}},
        "connectionDetails": {"values": {"password": "s3cret"}},
    }
    rsp = run(request(xr("XWidget"), step, {}))
    assert dict(rsp.desired.composite.connection_details) == {"password": b"s3cret"}
