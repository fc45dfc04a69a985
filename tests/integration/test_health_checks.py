"""The health checks of Argo CD (Lua) and Flux (CEL) on claims as the real App Cluster serves
them, in every state the Control Plane reports (the status subresource written as the
reconciler writes it: a top-level ``status.observedGeneration`` where the claim schema declares
it, as the catalog's XRDs make Crossplane's claim CRDs do on 1.20 and 2.x; a Ready or Synced
condition's where the schema declares that, Crossplane 2's claims; both counted in App
generations, the App generation the Control Plane copy has taken in; the stand-in CRDs of
catalog/dev/claim-crds.yaml preserve unknown status fields, so they take both).

``test_health_of_a_claim_the_reconciler_mirrors`` runs a claim through the reconciler with the
statuses Crossplane writes, and checks that the states above are what it produces."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from klutch_gitops.kube.resources import CRDS
from tests.kit.claims import POSTGRES, claim, write_status
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

from ..argocd_health import argocd_health
from ..flux_health import flux_health

READY = {"type": "Ready", "status": "True", "reason": "Available", "message": ""}
SYNCED = {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"}
CREATING = {"type": "Ready", "status": "False", "reason": "Creating", "message": ""}
FAILED = {
    "type": "Synced",
    "status": "False",
    "reason": "ReconcileError",
    "message": "cannot compose resources: plan postgresql-single-nano is sold out",
}
WHEN = "2026-11-21T10:00:00Z"


@pytest.fixture(scope="module")
def tenant(stack, clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenant]:
    """A tenant whose reconciler serves the claim kinds in the App Cluster; the claims of this
    module are not in its repository, so it leaves them alone."""
    world = make_tenant(stack, clusters, tmp_path_factory.mktemp("health"))

    def established() -> bool:
        crd = world.app.get(CRDS, None, f"{POSTGRES.plural}.{POSTGRES.group}") or {}
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    eventually(established, "the claim CRD in the App Cluster")
    yield world
    world.reconciler.stop()


def live_claim(
    tenant: Tenant, name: str, status: dict[str, Any] | None, generations: int = 1
) -> dict:
    """A claim with ``generations`` spec versions and then ``status``, read back."""
    plans = ["postgresql-single-nano", "postgresql-single-small", "postgresql-single-big"]
    for plan in plans[:generations]:
        tenant.app.apply(POSTGRES, yaml.safe_load(claim(name, tenant.namespace, plan)))
    if status is not None:
        conditions = [{"lastTransitionTime": WHEN, **c} for c in status.get("conditions", [])]
        tenant.app.apply(
            POSTGRES,
            {
                "apiVersion": "anynines.com/v1",
                "kind": "PostgresqlInstance",
                "metadata": {"name": name, "namespace": tenant.namespace},
                "status": {**status, "conditions": conditions},
            },
            force=True,
            subresource="status",
        )
    live = tenant.app.get(POSTGRES, tenant.namespace, name)
    assert live["metadata"]["generation"] == generations
    return live


WAITING = "Waiting for the Control Plane to report status"
STATES = {  # status, generations, Argo CD's health, Flux's status
    "no-status": (None, 1, ("Progressing", WAITING), "Unknown"),
    "no-conditions": ({"conditions": []}, 1, ("Progressing", WAITING), "InProgress"),
    "progressing": (
        {"conditions": [CREATING, SYNCED]},
        1,
        ("Progressing", "Creating"),
        "InProgress",
    ),
    "healthy": ({"conditions": [READY, SYNCED]}, 1, ("Healthy", "Available"), "Current"),
    "degraded": ({"conditions": [CREATING, FAILED]}, 1, ("Degraded", FAILED["message"]), "Failed"),
    "degraded-though-ready": (
        {"conditions": [READY, FAILED]},
        1,
        ("Degraded", FAILED["message"]),
        "Failed",
    ),
    # Crossplane 1.20's claims: conditions without a generation, so only the conditions count
    "changed-without-generations": (
        {"conditions": [READY, SYNCED]},
        2,
        ("Healthy", "Available"),
        "Current",
    ),
    "old-ready-generation": (
        {"conditions": [{**READY, "observedGeneration": 1}, {**SYNCED, "observedGeneration": 2}]},
        2,
        ("Progressing", "Waiting for the Control Plane to observe generation 2"),
        "InProgress",
    ),
    "old-condition-generation": (
        {"conditions": [{**READY, "observedGeneration": 2}, {**SYNCED, "observedGeneration": 2}]},
        3,
        ("Progressing", "Waiting for the Control Plane to observe generation 3"),
        "InProgress",
    ),
    "current-condition-generation": (
        {"conditions": [{**READY, "observedGeneration": 2}, {**SYNCED, "observedGeneration": 2}]},
        2,
        ("Healthy", "Available"),
        "Current",
    ),
    # the top-level generation the reconciler writes where the catalog's XRDs declare it; Flux
    # reads it before any expression (fluxcd/pkg runtime/cel/status_evaluator.go)
    "old-top-level-generation": (
        {"observedGeneration": 1, "conditions": [READY, SYNCED]},
        2,
        ("Progressing", "Waiting for the Control Plane to observe generation 2"),
        "InProgress",
    ),
    "current-top-level-generation": (
        {"observedGeneration": 2, "conditions": [READY, SYNCED]},
        2,
        ("Healthy", "Available"),
        "Current",
    ),
    "refused-change-top-level": (
        {"observedGeneration": 2, "conditions": [READY, FAILED]},
        2,
        ("Degraded", FAILED["message"]),
        "Failed",
    ),
    # a refused change: Synced False about this generation, Ready still about the one before
    "refused-change": (
        {"conditions": [{**READY, "observedGeneration": 1}, {**FAILED, "observedGeneration": 2}]},
        2,
        ("Degraded", FAILED["message"]),
        "Failed",
    ),
    "old-failure": (
        {
            "conditions": [
                {**CREATING, "observedGeneration": 1},
                {**FAILED, "observedGeneration": 1},
            ]
        },
        2,
        ("Progressing", "Waiting for the Control Plane to observe generation 2"),
        "InProgress",
    ),
}
FLUX_EXPRESSIONS = {
    e["kind"]: e
    for e in yaml.safe_load(
        (
            Path(__file__).resolve().parents[2] / "catalog/health/flux/health-check-exprs.yaml"
        ).read_text()
    )
}


@pytest.mark.parametrize("state", list(STATES))
def test_health_of_live_claims(tenant: Tenant, state: str) -> None:
    status, generations, argocd, flux = STATES[state]
    live = live_claim(tenant, state, status, generations)
    assert argocd_health(live) == argocd
    assert flux_health(live, FLUX_EXPRESSIONS[live["kind"]]) == flux


def health(live: dict) -> tuple[str, str]:
    """(Argo CD's status, Flux's status) of a live claim."""
    return argocd_health(live)[0], flux_health(live, FLUX_EXPRESSIONS[live["kind"]])


def test_health_of_a_claim_the_reconciler_mirrors(tenant: Tenant) -> None:
    """A claim in Git, its Control Plane copy's status written as Crossplane writes a claim's:
    1.20 sets no observedGeneration (crossplane internal/controller/apiextensions/claim/
    reconciler.go: SetConditions without WithObservedGeneration), 2.x sets the copy's generation
    on every condition it marks (crossplane-runtime/v2 pkg/conditions/manager.go,
    ObservedGenerationPropagationManager)."""
    ns = tenant.namespace

    def mirrored(generation: int, observed: int) -> dict:
        def check() -> dict | None:
            live = tenant.app.get(POSTGRES, ns, "piped") or {}
            status = live.get("status") or {}
            if live.get("metadata", {}).get("generation") != generation:
                return None
            ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
            # the top-level one (the stand-in schema takes it) follows the conditions' rules
            both = (ready.get("observedGeneration"), status.get("observedGeneration"))
            return live if both == (observed, observed) else None

        return eventually(check, f"generation {generation}, observed {observed}")

    def provider(status: dict) -> None:
        conditions = [{"lastTransitionTime": WHEN, **c} for c in status["conditions"]]
        write_status(tenant.control_plane, "piped", tenant.mapped, {"conditions": conditions})

    tenant.push({"claims/piped.yaml": claim("piped", ns)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "piped"), "the CP copy")
    provider({"conditions": [READY, SYNCED]})  # Crossplane 1.20's conditions
    live = mirrored(1, 1)  # the stand-in schema takes the generation: the reconciler's
    print(f"fed by the reconciler (1.20): {live['status']}")
    assert health(live) == ("Healthy", "Current")

    copy = tenant.control_plane.get(POSTGRES, tenant.mapped, "piped")
    seen = copy["metadata"]["generation"]
    provider(
        {
            "conditions": [
                {**READY, "observedGeneration": seen},
                {**SYNCED, "observedGeneration": seen},
            ]
        }
    )
    live = eventually(
        lambda: (
            (tenant.app.get(POSTGRES, ns, "piped")["status"]["conditions"][0]).get(
                "observedGeneration"
            )
            == 1
            and tenant.app.get(POSTGRES, ns, "piped")
        ),
        "the 2.x status mirrored",
    )
    print(f"fed by the reconciler (2.x): {live['status']}")
    assert health(live) == ("Healthy", "Current")

    tenant.push({"claims/piped.yaml": claim("piped", ns, "postgresql-single-small")}, "bigger")
    eventually(
        lambda: (
            tenant.control_plane.get(POSTGRES, tenant.mapped, "piped")["spec"]["plan"]
            == "postgresql-single-small"
        ),
        "the change on the Control Plane",
    )
    time.sleep(2)  # a few passes on the changed copy
    live = mirrored(2, 1)  # the copy's controller has not observed its new generation
    assert health(live) == ("Progressing", "InProgress")

    now = tenant.control_plane.get(POSTGRES, tenant.mapped, "piped")["metadata"]["generation"]
    provider(
        {
            "conditions": [
                {**READY, "observedGeneration": now},
                {**SYNCED, "observedGeneration": now},
            ]
        }
    )
    live = mirrored(2, 2)
    assert health(live) == ("Healthy", "Current")
