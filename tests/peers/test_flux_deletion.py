"""Deletions with the real Flux (tests/kit/flux.py): issue 16, defects 4 and 6.

What kustomize-controller v1.9.6 does here (internal/controller/kustomization_controller.go):
``prune`` sends a DELETE for what left the source and does not wait; an object back in the
source is server-side applied again on the next reconcile, and created when it is missing
(fluxcd/pkg ssa ResourceManager.ApplyAllStaged). So a deletion-protected claim that Flux pruned
stays terminating, held by our finalizer, until we let it go; once the claim is back in Git we
release it without touching the Control Plane copy, Flux re-creates it, and adoption takes it
back with the same copy (the service and its data).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import config

from klutch_gitops.inspect.claims import row
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import EVENTS
from reconciler.sync import objects
from tests.kit.claims import POSTGRES, claim, ready_status, write_status
from tests.kit.flux import FluxPeer
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

pytestmark = [pytest.mark.integration, pytest.mark.peers]

FLUX_WAIT = 60.0  # Flux's fetch and apply, on a loaded two-core machine
DATA = "provider.example/data"  # stands for the service's data: only the same copy keeps it
OTHER = "backup.example.com/snapshot"  # another controller's finalizer


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path, mode="files", app_sync="external")
    yield world
    world.reconciler.stop()


def protected(name: str, namespace: str) -> str:
    return claim(name, namespace).replace(
        "  namespace:",
        f'  annotations:\n    {objects.DELETION_PROTECTION}: "true"\n  namespace:',
        1,
    )


def follow(flux: FluxPeer, tenant: Tenant) -> str:
    name = tenant.spec.name
    flux.sync(name, flux.serve(tenant.remote), f"./{tenant.spec.path}")
    return name


def provider_ready(tenant: Tenant, name: str) -> None:
    """Ready as a Crossplane 1.20 claim reports it: no observedGeneration anywhere."""
    write_status(tenant.control_plane, name, tenant.mapped, ready_status(generation=None))


def live(tenant: Tenant, name: str) -> dict | None:
    return tenant.app.get(POSTGRES, tenant.namespace, name)


def ready_condition(obj: dict | None) -> dict:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Ready"), {})


def report(tenant: Tenant) -> dict:
    """This registration's entry in ``.klutch/reconcile.yaml``."""
    try:
        text = tenant.remote_file(f"{tenant.spec.path}/.klutch/reconcile.yaml")
    except Exception:  # not committed yet
        return {}
    entries = (yaml.safe_load(text) or {}).get("registrations") or {}
    return entries.get(tenant.spec.name) or {}


def test_a_protected_claim_flux_pruned_is_released_and_readopted_when_back_in_git(
    flux: FluxPeer, tenant: Tenant
) -> None:
    """Defect 4: held, reported not Ready everywhere; back in Git, the same Control Plane copy
    serves the re-created App object (before: Ready from Flux and reconcile.yaml while the
    object stayed terminating, and the documented way out deleted the copy)."""
    ns = tenant.namespace
    tenant.push({"claims/db.yaml": protected("db", ns), "claims/x.yaml": claim("x", ns)})
    kustomization = follow(flux, tenant)
    copy = eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy", FLUX_WAIT
    )
    tenant.control_plane.patch(
        POSTGRES, tenant.mapped, "db", {"metadata": {"annotations": {DATA: "rows"}}}
    )
    provider_ready(tenant, "db")
    eventually(lambda: ready_condition(live(tenant, "db")).get("status") == "True", "Ready")
    first_uid = live(tenant, "db")["metadata"]["uid"]

    tenant.push({"claims/db.yaml": None}, "drop the protected database")
    eventually(
        lambda: (live(tenant, "db") or {})["metadata"].get("deletionTimestamp"),
        f"Flux to prune db\n{flux.tails()}",
        timeout=FLUX_WAIT,
    )
    held = eventually(
        lambda: (
            ready_condition(live(tenant, "db")).get("reason") == "DeletionHeld"
            and live(tenant, "db")
        ),
        "Ready False on the held claim",
    )
    ready = ready_condition(held)
    assert ready["status"] == "False"
    print(f"held: {ready['message']}")
    assert row(held, all_namespaces=False)[2] == "False"  # klutch-gitops get's READY column
    events, _ = tenant.app.list(EVENTS, ns)
    assert [e["reason"] for e in events if e["involvedObject"]["name"] == "db"].count(
        "DeletionRefused"
    ) == 1
    entry = eventually(
        lambda: report(tenant).get("counts", {}).get("held") == 1 and report(tenant),
        "reconcile.yaml counts the held claim",
    )
    assert any("put the claim back in Git" in r["fix"] for r in entry["rejections"])
    print(f"reconcile.yaml while held: {entry['counts']}")

    tenant.push({"claims/db.yaml": protected("db", ns)}, "keep the database after all")
    back = time.monotonic()

    def readopted() -> dict | None:
        obj = live(tenant, "db")
        meta = (obj or {}).get("metadata") or {}
        if (
            not obj
            or meta["uid"] == first_uid
            or objects.FINALIZER not in meta.get("finalizers", [])
        ):
            return None
        return obj if ready_condition(obj).get("status") == "True" else None

    again = eventually(readopted, f"db re-created and adopted\n{flux.tails()}", FLUX_WAIT)
    print(f"re-created, adopted and Ready {time.monotonic() - back:.1f} s after the push")
    assert again["metadata"].get("deletionTimestamp") is None
    now = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
    assert now["metadata"]["uid"] == copy["metadata"]["uid"]  # the same copy ...
    assert now["metadata"]["annotations"][DATA] == "rows"  # ... with its data
    assert now["metadata"].get("deletionTimestamp") is None
    counts = eventually(
        lambda: report(tenant).get("counts", {}).get("held") == 0 and report(tenant)["counts"],
        "reconcile.yaml without the held claim",
    )
    assert counts["ready"] >= 1
    flux.suspend(kustomization)
    flux.delete(kustomization)


def test_another_controllers_finalizer_removed_while_we_release_is_not_brought_back(
    flux: FluxPeer, tenant: Tenant, stack, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """Defect 6: our release must not write a finalizer list it read before someone else
    changed it. The API server refuses new finalizers on an object being deleted
    (ValidateNoNewFinalizers in k8s.io/apimachinery pkg/api/validation/objectmeta.go), so what
    can change under the release of a pruned claim is another controller *removing* its own:
    a real second API client does so between our read and our write. The release carries the
    resourceVersion it read: a 409, read again, released in the same pass (before: the stale
    list re-added the other finalizer, the server refused it (422) and the pass failed)."""
    second = Kube(config.new_client_from_config(config_file=stack.clusters["app"].kubeconfig))
    ns = tenant.namespace
    tenant.push({"claims/db.yaml": claim("db", ns), "claims/x.yaml": claim("x", ns)})
    kustomization = follow(flux, tenant)
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy", FLUX_WAIT
    )
    adopted = eventually(
        lambda: (
            objects.FINALIZER
            in (live(tenant, "db") or {}).get("metadata", {}).get("finalizers", [])
            and live(tenant, "db")
        ),
        "adopted",
    )
    meta = adopted["metadata"]
    second.patch(
        POSTGRES,
        ns,
        "db",
        {
            "metadata": {
                "resourceVersion": meta["resourceVersion"],
                "finalizers": [*meta["finalizers"], OTHER],
            }
        },
    )
    raced: list[list[str]] = []
    release = objects.finalizer_release

    def racing(obj: dict, finalizer: str = objects.FINALIZER) -> dict | None:
        patch = release(obj, finalizer)
        if patch is not None and obj["metadata"]["name"] == "db" and not raced:
            fresh = second.get(POSTGRES, ns, "db")["metadata"]
            kept = [f for f in fresh["finalizers"] if f != OTHER]
            second.patch(
                POSTGRES,
                ns,
                "db",
                {"metadata": {"resourceVersion": fresh["resourceVersion"], "finalizers": kept}},
            )
            raced.append(patch["metadata"]["finalizers"])
        return patch

    monkeypatch.setattr(objects, "finalizer_release", racing)
    caplog.set_level("WARNING")
    tenant.push({"claims/db.yaml": None}, "drop the database")
    eventually(
        lambda: live(tenant, "db") is None and raced,
        f"Flux prunes, the CP copy goes, the object goes\n{flux.tails()}",
        FLUX_WAIT,
    )
    assert raced == [[OTHER]], raced  # what a release without precondition would have written
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is None
    failed = [r.getMessage() for r in caplog.records if "sync failed" in r.getMessage()]
    assert failed == [], failed
    flux.suspend(kustomization)
    flux.delete(kustomization)
