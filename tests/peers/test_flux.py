"""``appSync: external`` with the real Flux: source-controller and kustomize-controller v1.9.6
(tests/kit/flux.py) apply a tenant's claims to the App Cluster while an in-process reconciler
adopts, mirrors and writes status back.

What Flux does, from kustomize-controller@v1.9.6 internal/controller/kustomization_controller.go:
it server-side applies with the field manager ``kustomize-controller`` (and forces), labels what
it applied ``kustomize.toolkit.fluxcd.io/name``/``…/namespace``, prunes what left the source
(``prune``: a DELETE per object, not awaited), and with ``wait: true`` checks the health of the
objects of its inventory (``checkHealth``; a pruned object is no longer in the inventory).
"""

from __future__ import annotations

import logging
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from klutch_gitops.kube.resources import EVENTS
from reconciler.sync import objects
from tests.kit.claims import POSTGRES, claim, is_ready
from tests.kit.flux import FluxPeer, condition
from tests.kit.tenant import Tenant, make_tenant, report_ready
from tests.kit.wait import eventually

pytestmark = [pytest.mark.integration, pytest.mark.peers]

HEALTH_EXPRS = Path(__file__).parents[2] / "catalog/health/flux/health-check-exprs.yaml"
MANAGER = "kustomize-controller"  # kustomize-controller's main.go: controllerName
CHURN_WINDOW = 60.0  # seconds of quiet watched for generation churn
FLUX_WAIT = 60.0  # Flux's first fetch and apply, on a loaded two-core machine


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path, mode="files", app_sync="external")
    yield world
    started = time.monotonic()
    world.reconciler.stop()
    print(f"reconciler stopped in {time.monotonic() - started:.1f} s")


def health_check_exprs() -> list[dict]:
    """Ours, as published: the list a Kustomization's spec.healthCheckExprs takes."""
    return yaml.safe_load(HEALTH_EXPRS.read_text())


def follow(flux: FluxPeer, tenant: Tenant, *, wait: bool = True) -> str:
    """Point a Kustomization named after the tenant at its repository's claims; its name."""
    name = tenant.spec.name
    flux.sync(
        name,
        flux.serve(tenant.remote),
        f"./{tenant.spec.path}",
        wait=wait,
        health_check_exprs=health_check_exprs() if wait else None,
    )
    return name


def applied(flux: FluxPeer, tenant: Tenant, name: str) -> dict:
    """The claim once kustomize-controller has applied it."""
    return eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, name),
        f"Flux to apply {name}\n{flux.tails()}",
        timeout=FLUX_WAIT,
        interval=0.05,
    )


def adopted(tenant: Tenant, name: str) -> dict | None:
    live = tenant.app.get(POSTGRES, tenant.namespace, name)
    meta = (live or {}).get("metadata") or {}
    if objects.FINALIZER not in (meta.get("finalizers") or []):
        return None
    if (meta.get("labels") or {}).get(objects.REPOSITORY_LABEL) != tenant.spec.name:
        return None
    return live


def status_path(tenant: Tenant, name: str) -> str:
    return f"{tenant.spec.path}/.klutch/status/{tenant.namespace}/PostgresqlInstance/{name}.yaml"


def committed_status(tenant: Tenant, name: str) -> dict | None:
    try:
        return yaml.safe_load(tenant.remote_file(status_path(tenant, name))) or None
    except Exception:  # not committed yet
        return None


def contains(tenant: Tenant, revision: str, commit: str) -> bool:
    """Whether Flux's revision (``main@sha1:<sha>``) is ``commit`` or a descendant of it."""
    sha = revision.rpartition(":")[2]
    if not sha:
        return False
    ancestor = subprocess.run(
        ["git", "merge-base", "--is-ancestor", commit, sha], cwd=tenant.remote, check=False
    )
    return ancestor.returncode == 0


def ready_at(flux: FluxPeer, tenant: Tenant, kustomization: str, commit: str) -> tuple:
    """Flux's Ready condition once it says True at ``commit`` or a status commit on top of it."""

    def check() -> tuple[str, str, str]:
        live = flux.kustomization(kustomization)
        revision = (live.get("status") or {}).get("lastAppliedRevision") or ""
        state = flux.ready(kustomization)
        assert state[0] == "True", state
        assert contains(tenant, revision, commit), revision
        return state

    return eventually(check, f"Flux Ready at {commit[:12]} or later", FLUX_WAIT)


def managers(obj: dict) -> dict[tuple[str, str, str], dict]:
    return {
        (e["manager"], e["operation"], e.get("subresource", "")): e.get("fieldsV1") or {}
        for e in obj["metadata"]["managedFields"]
    }


def assert_ownership(live: dict) -> None:
    """Flux owns what it applied, we own our label, our finalizer and status, nothing else."""
    fields = managers(live)
    assert {m for m, _, _ in fields} == {MANAGER, "klutch-gitops"}, list(fields)
    flux_fields = fields[(MANAGER, "Apply", "")]
    assert {"f:spec", "f:metadata"} <= set(flux_fields), flux_fields
    flux_labels = set(flux_fields["f:metadata"]["f:labels"])
    assert {
        "f:kustomize.toolkit.fluxcd.io/name",
        "f:kustomize.toolkit.fluxcd.io/namespace",
    } <= flux_labels, flux_labels
    ours = fields[("klutch-gitops", "Apply", "")]
    assert set(ours) == {"f:metadata"}, ours
    assert set(ours["f:metadata"]) == {"f:labels", "f:finalizers"}, ours
    assert set(ours["f:metadata"]["f:labels"]) - {"."} == {f"f:{objects.REPOSITORY_LABEL}"}
    assert set(fields[("klutch-gitops", "Apply", "status")]) == {"f:status"}


def churn(tenant: Tenant, name: str) -> tuple[int, str, int, str]:
    app = tenant.app.get(POSTGRES, tenant.namespace, name)
    copy = tenant.control_plane.get(POSTGRES, tenant.mapped, name)
    return (
        app["metadata"]["generation"],
        app["metadata"]["resourceVersion"],
        copy["metadata"]["generation"],
        copy["metadata"]["resourceVersion"],
    )


def watch_quiet(flux: FluxPeer, tenant: Tenant, kustomization: str) -> None:
    """Once Flux has applied Git's newest commit (a status commit, likely), nothing changes for
    ``CHURN_WINDOW`` seconds: no generation or resourceVersion of the claim or its copy, no
    commit, no new Flux revision, and Flux is Ready at the end."""

    def caught_up() -> tuple[str, str]:
        """Git's head and Flux's revision, once Flux is Ready at the head."""
        head = tenant.log()[0].split()[0]
        revision = flux.kustomization(kustomization)["status"]["lastAppliedRevision"]
        assert revision.endswith(head), (revision, head)
        assert flux.ready(kustomization)[0] == "True"
        return head, revision

    # the window starts once Flux has applied the newest commit (a status commit, likely)
    head, revision = eventually(caught_up, "Flux at Git's head", FLUX_WAIT)
    before = churn(tenant, "db")
    time.sleep(CHURN_WINDOW)  # Flux reconciles every 2 s meanwhile
    print(f"no churn window: {CHURN_WINDOW:.0f} s, Flux at {revision}")
    assert churn(tenant, "db") == before, "a write in a quiet window: someone is flapping"
    assert tenant.log()[0].split()[0] == head, "a commit in a quiet window"
    assert flux.kustomization(kustomization)["status"]["lastAppliedRevision"] == revision
    # every reconciliation marks Ready Unknown while it runs (kustomization_controller.go
    # reconcile: "Reconciliation in progress"), so Ready again, at the same revision
    eventually(lambda: flux.ready(kustomization)[0] == "True", "Flux Ready again", FLUX_WAIT)
    assert flux.kustomization(kustomization)["status"]["lastAppliedRevision"] == revision


def test_flux_applies_the_reconciler_mirrors_and_reports_ready_without_conflict(
    flux: FluxPeer, tenant: Tenant, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    kustomization = follow(flux, tenant)
    applied(flux, tenant, "db")
    flux_applied = time.monotonic()
    eventually(lambda: adopted(tenant, "db"), "our finalizer and label")
    copy = eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the Control Plane copy"
    )
    assert copy["spec"] == tenant.app.get(POSTGRES, tenant.namespace, "db")["spec"]
    assert not any(k.startswith("kustomize.toolkit") for k in copy["metadata"].get("labels", {}))
    # wait: true with our expressions: not Ready while the claim is not
    waiting = flux.ready(kustomization)
    print(f"Flux before the claim is Ready: {waiting}")
    assert waiting[0] != "True", waiting

    report_ready(tenant, "db")  # the provider, as soon as the copy is there
    reported = time.monotonic()
    eventually(
        lambda: is_ready((committed_status(tenant, "db") or {}).get("status")),
        "the status commit with Ready",
        interval=0.05,
    )
    done = time.monotonic()
    print(
        f"status commit {done - flux_applied:.1f} s after Flux applied "
        f"(the provider reported Ready {reported - flux_applied:.1f} s after it)"
    )
    assert is_ready(tenant.app.get(POSTGRES, tenant.namespace, "db").get("status"))
    eventually(
        lambda: flux.ready(kustomization)[0] == "True",
        f"Flux's health check to see the claim Ready\n{flux.tails()}",
        timeout=FLUX_WAIT,
    )
    print(f"Flux Ready: {flux.ready(kustomization)}")

    watch_quiet(flux, tenant, kustomization)

    live = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert_ownership(live)
    assert flux.conflicts() == [], flux.conflicts()
    assert [r.getMessage() for r in caplog.records if "409" in r.getMessage()] == []
    flux.suspend(kustomization)  # its deletion prunes nothing then
    flux.delete(kustomization)


def test_a_pruned_claim_is_held_until_its_copy_is_gone_while_flux_says_ready(
    flux: FluxPeer, tenant: Tenant
) -> None:
    """Defect 3 of issue 16: ``wait: true`` does not make the Kustomization wait for a held
    deletion. kustomize-controller's ``prune`` sends the DELETE and moves on (no wait), the object
    leaves the inventory, and ``checkHealth`` looks at the inventory only: Ready while the claim
    is still held by our finalizer. Only deleting the Kustomization itself with
    ``deletionPolicy: WaitForTermination`` waits (``finalize``)."""
    tenant.push({f"claims/{n}.yaml": claim(n, tenant.namespace) for n in ("db", "keep")})
    kustomization = follow(flux, tenant)
    for name in ("db", "keep"):
        eventually(lambda n=name: tenant.control_plane.get(POSTGRES, tenant.mapped, n), name)
        report_ready(tenant, name)
    eventually(lambda: flux.ready(kustomization)[0] == "True", "Flux Ready", timeout=FLUX_WAIT)
    # the provider takes its time to deprovision
    tenant.control_plane.patch(
        POSTGRES, tenant.mapped, "db", {"metadata": {"finalizers": ["provider.example/deprov"]}}
    )

    pruned = tenant.push({"claims/db.yaml": None}, "drop the database")
    eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "db")["metadata"].get(
            "deletionTimestamp"
        ),
        f"Flux to prune db\n{flux.tails()}",
        timeout=FLUX_WAIT,
    )
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db")["metadata"].get(
            "deletionTimestamp"
        ),
        "the Control Plane copy to be deleting",
    )
    held = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert held["metadata"]["finalizers"] == [objects.FINALIZER]

    state = ready_at(flux, tenant, kustomization, pruned)
    print(f"Flux while the claim is held: {state}")
    assert tenant.app.get(POSTGRES, tenant.namespace, "db")["metadata"]["deletionTimestamp"]
    inventory = [
        e["id"] for e in flux.kustomization(kustomization)["status"]["inventory"]["entries"]
    ]
    assert not any(entry.endswith("_db_anynines.com_PostgresqlInstance") for entry in inventory)

    tenant.control_plane.patch(POSTGRES, tenant.mapped, "db", {"metadata": {"finalizers": None}})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is None, "CP gone")
    eventually(lambda: tenant.app.get(POSTGRES, tenant.namespace, "db") is None, "App gone")
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "keep") is not None
    flux.suspend(kustomization)  # leave "keep" alone when the Kustomization goes
    flux.delete(kustomization)


def test_a_protected_claim_pruned_by_flux_is_held_and_reported(
    flux: FluxPeer, tenant: Tenant
) -> None:
    protected = claim("db", tenant.namespace).replace(
        "  namespace:",
        f'  annotations:\n    {objects.DELETION_PROTECTION}: "true"\n  namespace:',
        1,
    )
    tenant.push({"claims/db.yaml": protected, "claims/other.yaml": claim("x", tenant.namespace)})
    kustomization = follow(flux, tenant, wait=False)
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy", 60)

    pruned = tenant.push({"claims/db.yaml": None}, "drop the protected database")
    eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "db")["metadata"].get(
            "deletionTimestamp"
        ),
        f"Flux to prune db\n{flux.tails()}",
        timeout=FLUX_WAIT,
    )

    def refused() -> list[dict]:
        events, _ = tenant.app.list(EVENTS, tenant.namespace)
        return [e for e in events if e["reason"] == "DeletionRefused"]

    event = eventually(refused, "the refusal reported on the claim")[0]
    print(f"reported: {event['message']}")
    assert "deletion-protect" in event["message"]
    time.sleep(3)  # a few more passes of both
    assert (
        tenant.control_plane.get(POSTGRES, tenant.mapped, "db")["metadata"].get("deletionTimestamp")
        is None
    )
    held = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert held["metadata"]["deletionTimestamp"]
    assert objects.FINALIZER in held["metadata"]["finalizers"]
    ready = eventually(
        lambda: (
            condition(tenant.app.get(POSTGRES, tenant.namespace, "db"), "Ready")[1]
            == "DeletionHeld"
            and condition(tenant.app.get(POSTGRES, tenant.namespace, "db"), "Ready")
        ),
        "the held claim's Ready condition",
    )
    print(f"the held claim says: {ready}")
    assert ready[0] == "False"
    report = tenant.reconciler.syncs[tenant.spec.name].schedule.report
    assert report is not None
    assert any("deletion-protected" in r.message for r in report.summary.rejections)
    state = ready_at(flux, tenant, kustomization, pruned)
    print(f"Flux while the protected claim is held: {state}")
    flux.suspend(kustomization)
    flux.delete(kustomization)
