"""Progress with the real Flux (tests/kit/flux.py): issue 16, defect 5.

kustomize-controller v1.9.6 with ``wait: true`` and ``healthCheckExprs`` checks the objects of
its inventory with fluxcd/pkg runtime/cel (status_evaluator.go): a top-level
``status.observedGeneration`` that differs from ``metadata.generation`` makes an object
InProgress, then our expressions run in order inProgress, failed, current. Crossplane's own
claim schema declares no top-level one (crossplane v1.20.13 internal/xcrd/schemas.go), and
Crossplane 1.20's claim reconciler stamps no condition
(internal/controller/apiextensions/claim/reconciler.go), so before the fix Flux read a changed
claim's Ready from the previous generation and reported the new revision Ready at once. The
catalog's XRDs now declare it and Crossplane merges an XRD's status properties into the claim
CRD (internal/xcrd/crd.go genCrdVersion); the reconciler writes there, and on Ready and Synced
where the schema declares that, the App generation the Control Plane copy has taken in (the
stand-in CRDs preserve unknown status fields, so both); this test holds the reconciler back to
show Flux waits.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from reconciler.manager import Reconciler
from tests.kit.claims import POSTGRES, claim, ready_status, write_status
from tests.kit.flux import FluxPeer
from tests.kit.git import git
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

pytestmark = [pytest.mark.integration, pytest.mark.peers]

HEALTH_EXPRS = Path(__file__).parents[2] / "catalog/health/flux/health-check-exprs.yaml"
FLUX_WAIT = 60.0  # Flux's fetch, apply and health check, on a loaded two-core machine
HELD_BACK = 12.0  # seconds the status stays behind: several 2 s Flux reconciles


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path, mode="files", app_sync="external")
    yield world
    world.reconciler.stop()


def ready_at(flux: FluxPeer, tenant: Tenant, name: str, commit: str) -> bool:
    """Whether the Kustomization is Ready at ``commit`` or a later one (the reconciler's status
    commits move the branch Flux follows): its health checks passed there."""
    revision = (flux.kustomization(name).get("status") or {}).get("lastAppliedRevision") or ""
    applied = revision.rpartition(":")[2]
    if not applied or flux.ready(name)[0] != "True":
        return False
    try:
        git(tenant.remote, "merge-base", "--is-ancestor", commit, applied)
    except subprocess.CalledProcessError:
        return False
    return True


def ready_generation(status: dict) -> int | None:
    """The generation the App copy's Ready condition says it observed."""
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    return ready.get("observedGeneration")


def test_flux_waits_for_the_status_of_a_changed_claims_new_generation(
    flux: FluxPeer, tenant: Tenant
) -> None:
    ns = tenant.namespace
    first = tenant.push({"claims/db.yaml": claim("db", ns)})
    name, url = tenant.spec.name, flux.serve(tenant.remote)
    flux.sync(name, url, f"./{tenant.spec.path}")
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy", FLUX_WAIT
    )
    # Ready as Crossplane 1.20 reports a claim: no observedGeneration anywhere
    write_status(tenant.control_plane, "db", tenant.mapped, ready_status(generation=None))
    eventually(
        lambda: "status" in tenant.app.get(POSTGRES, ns, "db"), "the status mirrored", FLUX_WAIT
    )
    # health checks from here on: a claim without any status makes our expressions fail to
    # evaluate, and Flux then waits out its timeout (60 s) before it looks again
    exprs = yaml.safe_load(HEALTH_EXPRS.read_text())
    flux.sync(name, url, f"./{tenant.spec.path}", wait=True, health_check_exprs=exprs)
    eventually(
        lambda: ready_at(flux, tenant, name, first), f"Ready at {first}\n{flux.tails()}", FLUX_WAIT
    )
    status = tenant.app.get(POSTGRES, ns, "db")["status"]
    print(f"the App copy's status, as the reconciler writes it: {status}")
    assert status["observedGeneration"] == 1  # the stand-in schema takes it, as the XRDs declare it
    assert ready_generation(status) == 1

    tenant.reconciler.stop()  # the reconciler falls behind (down, busy, far away)
    second = tenant.push(
        {"claims/db.yaml": claim("db", ns, "postgresql-single-small")}, "a bigger plan"
    )
    eventually(
        lambda: tenant.app.get(POSTGRES, ns, "db")["metadata"]["generation"] == 2,
        f"Flux applies generation 2\n{flux.tails()}",
        FLUX_WAIT,
    )
    applied = time.monotonic()
    while time.monotonic() - applied < HELD_BACK:
        assert not ready_at(flux, tenant, name, second), flux.ready(name)
        time.sleep(0.5)
    print(f"Flux while the status is behind: {flux.ready(name)}")

    caught_up = Reconciler(tenant.config)
    caught_up.start()
    try:
        eventually(
            lambda: ready_at(flux, tenant, name, second),
            f"Ready at {second}\n{flux.tails()}",
            FLUX_WAIT,
        )
        print(f"Ready at the new revision {time.monotonic() - applied:.1f} s after Flux applied")
        live = tenant.app.get(POSTGRES, ns, "db")
        assert live["status"]["observedGeneration"] == 2
        assert ready_generation(live["status"]) == 2
        copy = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
        assert copy["spec"]["plan"] == "postgresql-single-small"
    finally:
        caught_up.stop()
        flux.suspend(name)
        flux.delete(name)
