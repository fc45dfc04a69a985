"""Deletion-protected claims whose App object someone deletes, with ``appSync: reconciler``
(issue 16, defect 4): the reconciler applies the App copy itself, so a held object released
because Git names it is re-created by its own next apply; the Control Plane copy (the service
and its data) is never touched on the way. Out of Git, the deletion is held and the claim
reported not Ready: on the App object, in reconcile.yaml, on the RepositoryBinding's status
(the registration's last pass, reconciler/status.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from reconciler.status import Report, binding_conditions
from reconciler.sync import objects
from tests.kit.claims import POSTGRES, claim, ready_status, write_status
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

pytestmark = pytest.mark.integration

DATA = "provider.example/data"  # stands for the service's data: only the same copy keeps it


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path)
    yield world
    world.reconciler.stop()


def protected(name: str, namespace: str) -> str:
    return claim(name, namespace).replace(
        "  namespace:",
        f'  annotations:\n    {objects.DELETION_PROTECTION}: "true"\n  namespace:',
        1,
    )


def live(tenant: Tenant) -> dict | None:
    return tenant.app.get(POSTGRES, tenant.namespace, "db")


def uid(obj: dict | None) -> str | None:
    return (obj or {}).get("metadata", {}).get("uid")


def ready_of(obj: dict | None) -> dict:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def counts(tenant: Tenant) -> dict:
    try:
        text = tenant.remote_file("claims/.klutch/reconcile.yaml")
    except Exception:  # not committed yet
        return {}
    return yaml.safe_load(text)["registrations"][tenant.spec.name]["counts"]


def with_service(tenant: Tenant) -> dict:
    """A protected claim, applied, its copy Ready and marked with 'data'; the copy."""
    tenant.push({"claims/db.yaml": protected("db", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    tenant.control_plane.patch(
        POSTGRES, tenant.mapped, "db", {"metadata": {"annotations": {DATA: "rows"}}}
    )
    write_status(tenant.control_plane, "db", tenant.mapped, ready_status(generation=None))
    eventually(lambda: ready_of(live(tenant)).get("status") == "True", "Ready mirrored")
    return tenant.control_plane.get(POSTGRES, tenant.mapped, "db")


def assert_same_service(tenant: Tenant, copy: dict) -> None:
    now = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
    assert now["metadata"]["uid"] == copy["metadata"]["uid"]
    assert now["metadata"]["annotations"][DATA] == "rows"
    assert now["metadata"].get("deletionTimestamp") is None


def test_a_protected_claim_deleted_while_in_git_is_recreated_with_its_service(
    tenant: Tenant,
) -> None:
    copy = with_service(tenant)
    first = uid(live(tenant))
    tenant.app.delete(POSTGRES, tenant.namespace, "db")  # someone's kubectl delete
    again = eventually(
        lambda: uid(live(tenant)) not in (None, first) and live(tenant), "re-created by our apply"
    )
    assert objects.FINALIZER in again["metadata"]["finalizers"]
    eventually(lambda: ready_of(live(tenant)).get("status") == "True", "Ready mirrored again")
    assert_same_service(tenant, copy)


def test_a_protected_claim_deleted_out_of_git_is_held_until_it_is_back(tenant: Tenant) -> None:
    copy = with_service(tenant)
    tenant.push({"claims/db.yaml": None}, "drop the protected database")
    eventually(lambda: "held" in counts(tenant) and counts(tenant)["problems"], "prune refused")
    tenant.app.delete(POSTGRES, tenant.namespace, "db")
    held = eventually(
        lambda: ready_of(live(tenant)).get("reason") == "DeletionHeld" and live(tenant),
        "Ready False on the held claim",
    )
    assert held["metadata"]["deletionTimestamp"]
    assert ready_of(held)["status"] == "False"
    eventually(lambda: counts(tenant).get("held") == 1, "held in reconcile.yaml")
    sync = tenant.reconciler.syncs[tenant.spec.name]
    report = Report(None, registered=True, head=sync.head, last_pass=sync.last_pass, pending=False)
    ready = binding_conditions(report)  # what reconciler/reporting.py writes to the binding
    print(f"RepositoryBinding Ready while held: {ready[0]}")
    assert ready[0]["status"] == "False"
    assert "deletion-protected" in ready[0]["message"]
    assert_same_service(tenant, copy)

    tenant.push({"claims/db.yaml": protected("db", tenant.namespace)}, "keep it after all")
    eventually(
        lambda: (
            uid(live(tenant)) not in (None, uid(held))
            and not live(tenant)["metadata"].get("deletionTimestamp")
        ),
        "released and re-created",
    )
    eventually(lambda: ready_of(live(tenant)).get("status") == "True", "Ready mirrored again")
    eventually(lambda: counts(tenant).get("held") == 0, "reconcile.yaml without it")
    assert_same_service(tenant, copy)
