"""Claims tell on themselves, on the real stack: a refused change shows on the live App claim
(``Synced`` False, a Warning Event) until it is fixed, and Events aggregate instead of piling up
(klutch_gitops/kube/events.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.resources import EVENTS
from reconciler.sync import objects
from tests.kit.claims import POSTGRES, claim, write_status
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

PASSES = 10

# What a Crossplane provider reports (crossplane/crossplane-runtime apis/common/v1/condition.go:
# TypeSynced with ReasonReconcileSuccess), so "fixed" can show the provider's Synced again.
PROVIDER_STATUS = {
    "conditions": [
        {
            "type": "Ready",
            "status": "True",
            "reason": "Available",
            "lastTransitionTime": "2026-11-21T10:00:00Z",
        },
        {
            "type": "Synced",
            "status": "True",
            "reason": "ReconcileSuccess",
            "lastTransitionTime": "2026-11-21T10:00:00Z",
        },
    ]
}


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path)
    yield world
    world.reconciler.stop()


def synced(tenant: Tenant) -> dict | None:
    live = tenant.app.get(POSTGRES, tenant.namespace, "db") or {}
    conditions = (live.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Synced"), None)


def events_of(tenant: Tenant, reason: str) -> list[dict]:
    items, _ = tenant.app.list(EVENTS, tenant.namespace)
    return [e for e in items if e["reason"] == reason and e["involvedObject"]["name"] == "db"]


def passes(tenant: Tenant, count: int = PASSES) -> None:
    """Run ``count`` passes of the tenant's repository (as informer events and polls would)."""
    sync = tenant.reconciler.syncs[tenant.spec.name]
    for _ in range(count):
        sync.sync()


def applied(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    write_status(tenant.control_plane, "db", tenant.mapped, PROVIDER_STATUS)
    eventually(
        lambda: (synced(tenant) or {}).get("reason") == "ReconcileSuccess", "the provider's Synced"
    )


def test_a_refused_change_shows_on_the_live_claim_until_fixed(tenant: Tenant) -> None:
    applied(tenant)
    [normal] = eventually(lambda: events_of(tenant, "Synced"), "a Normal Event for the apply")
    assert normal["type"] == "Normal"
    assert normal["reportingComponent"] == "klutch-gitops"

    tenant.push(
        {"claims/db.yaml": claim("db", tenant.namespace, plan="postgresql-jumbo")},
        "oops: a plan nobody offers",
    )
    condition = eventually(
        lambda: (c := synced(tenant)) and c["status"] == "False" and c, "Synced False on the claim"
    )
    assert condition["reason"] == "ReconcileError"
    assert "claims/db.yaml (document 1)" in condition["message"]
    assert "postgresql-jumbo" in condition["message"]
    assert "fix:" in condition["message"]
    live = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert live is not None
    assert live["spec"]["plan"] == "postgresql-single-nano"  # the old spec stays live
    [warning] = eventually(lambda: events_of(tenant, "ReconcileError"), "the Warning Event")
    assert warning["type"] == "Warning"
    assert warning["message"] == condition["message"]

    passes(tenant)  # a standing refusal: no new Event, no count per pass, no status rewrite
    [again] = events_of(tenant, "ReconcileError")
    assert (again["metadata"]["name"], again["count"]) == (warning["metadata"]["name"], 1)
    assert synced(tenant) == condition

    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)}, "fix the plan")
    back = eventually(
        lambda: (c := synced(tenant)) and c["status"] == "True" and c, "the provider's Synced back"
    )
    # the provider's condition, counted in App generations (the stand-in schema declares that)
    generation = tenant.app.get(POSTGRES, tenant.namespace, "db")["metadata"]["generation"]
    assert back == {**PROVIDER_STATUS["conditions"][1], "observedGeneration": generation}
    assert len(events_of(tenant, "ReconcileError")) == 1


def test_a_standing_deletion_refusal_is_one_event_with_a_bounded_count(tenant: Tenant) -> None:
    applied(tenant)
    tenant.app.patch(
        POSTGRES,
        tenant.namespace,
        "db",
        {"metadata": {"annotations": {objects.DELETION_PROTECTION: "true"}}},
    )
    tenant.push({"claims/db.yaml": None}, "try to drop a protected database")
    [refused] = eventually(lambda: events_of(tenant, "DeletionRefused"), "DeletionRefused")
    passes(tenant)
    [still] = events_of(tenant, "DeletionRefused")
    assert still["metadata"]["name"] == refused["metadata"]["name"]
    assert still["count"] == 1  # told again at most every five minutes, not per pass
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is not None


POLICIES = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicies",
    "ValidatingAdmissionPolicy",
    namespaced=False,
)
POLICY_BINDINGS = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)


@contextmanager
def control_plane_refuses_big_plans(tenant: Tenant) -> Iterator[None]:
    """A ValidatingAdmissionPolicy in the tenant's mapped namespace only (the stack is shared):
    the Control Plane refuses what the loader accepts, as a provider's webhook would."""
    name = f"refuse-big-{uuid.uuid4().hex[:8]}"
    only_ours = {"matchLabels": {"kubernetes.io/metadata.name": tenant.mapped}}
    rule = {
        "apiGroups": [POSTGRES.group],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": [POSTGRES.plural],
    }
    tenant.control_plane.apply(
        POLICIES,
        {
            "apiVersion": POLICIES.api_version,
            "kind": POLICIES.kind,
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [rule], "namespaceSelector": only_ours},
                "validations": [
                    {
                        "expression": "object.spec.plan != 'postgresql-single-big'",
                        "message": "no big plans in this namespace",
                    }
                ],
            },
        },
    )
    tenant.control_plane.apply(
        POLICY_BINDINGS,
        {
            "apiVersion": POLICY_BINDINGS.api_version,
            "kind": POLICY_BINDINGS.kind,
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": only_ours},
            },
        },
    )
    try:
        yield
    finally:
        tenant.control_plane.delete(POLICY_BINDINGS, None, name)
        tenant.control_plane.delete(POLICIES, None, name)


def big(tenant: Tenant) -> dict:
    body = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
    assert body is not None
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {"name": "db", "namespace": tenant.mapped},
        "spec": {**body["spec"], "plan": "postgresql-single-big"},
    }


def refused_by_policy(tenant: Tenant) -> bool:
    try:
        tenant.control_plane.apply(POSTGRES, big(tenant), dry_run=True, force=True)
    except KubeError as error:
        return "no big plans" in error.message
    return False


def test_a_control_plane_refusal_shows_on_the_live_claim_until_it_applies(tenant: Tenant) -> None:
    applied(tenant)
    with control_plane_refuses_big_plans(tenant):
        eventually(lambda: refused_by_policy(tenant), "the admission policy in force")
        tenant.push(
            {"claims/db.yaml": claim("db", tenant.namespace, plan="postgresql-single-big")},
            "a plan the Control Plane refuses",
        )
        condition = eventually(
            lambda: (c := synced(tenant)) and c["status"] == "False" and c, "Synced False"
        )
        assert condition["reason"] == "ReconcileError"
        assert "Control Plane refused" in condition["message"]
        assert "no big plans" in condition["message"]
        eventually(lambda: events_of(tenant, "ReconcileError"), "the Warning Event")
    passes(tenant, 1)  # the policy is gone: the next pass applies
    eventually(
        lambda: (
            (tenant.control_plane.get(POSTGRES, tenant.mapped, "db") or {})["spec"]["plan"]
            == "postgresql-single-big"
        ),
        "the change applied",
    )
    eventually(lambda: (synced(tenant) or {}).get("status") == "True", "Synced True again")
