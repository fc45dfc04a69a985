"""Claims tell on themselves, on the real stack: a refused change shows on the live App claim
(``Synced`` False, a Warning Event) until it is fixed, and Events aggregate instead of piling up
(klutch_gitops/kube/events.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from klutch_gitops.dev.testkit.claims import POSTGRES, claim, write_status
from klutch_gitops.dev.testkit.tenant import Tenant, make_tenant
from klutch_gitops.dev.testkit.wait import eventually
from klutch_gitops.kube.client import EVENTS
from reconciler.sync import objects

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
    eventually(
        lambda: synced(tenant) == PROVIDER_STATUS["conditions"][1], "the provider's Synced back"
    )
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
