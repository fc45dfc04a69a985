"""A kube-apiserver of either cluster, or etcd under both, killed while the reconciler applies a
push of many claims, and started again with the same ports and data: both clusters and Git
converge, and the status commit for every claim is made once."""

from __future__ import annotations

import time

import pytest

from klutch_gitops.kube.client import Kube
from tests.kit.claims import POSTGRES, claim, git_claims, is_ready
from tests.kit.git import commits, duplicates, lost, touching
from tests.kit.tenant import Tenant, mirrored, report_ready
from tests.kit.wait import eventually

from .conftest import Faults
from .harness import ReconcilerProcess

CLAIMS = 40  # one file each; eight are applied at a time, so a kill lands mid-pass
OUTAGE = 3.0  # seconds the killed process stays down: passes fail and back off meanwhile


def first_arrivals(kube: Kube, namespace: str, seen: int, timeout: float = 120) -> int:
    """How many claims beyond ``seen`` are in ``namespace`` at the first sign of the pass,
    polled without pause: the moment to kill is now, not a poll interval later."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (count := len(kube.list(POSTGRES, namespace)[0])) > seen:
            return count - seen
    pytest.fail(f"no new claim in {namespace} within {timeout:.0f}s")


@pytest.mark.parametrize(
    ("component", "watched"),
    [
        ("kube-apiserver-app", "app"),
        ("kube-apiserver-control-plane", "control-plane"),
        ("etcd", "control-plane"),
    ],
)
def test_a_server_killed_mid_sync_converges(
    component: str,
    watched: str,
    tenant: Tenant,
    reconciler: ReconcilerProcess,
    faults: Faults,
) -> None:
    pushed = [tenant.push({"claims/seed.yaml": claim("seed", tenant.namespace)}, "a database")]
    reconciler.start()
    eventually(
        lambda: mirrored(tenant, git_claims(tenant.remote)), "the first claim everywhere", 120
    )

    names = [f"db-{i:02d}" for i in range(CLAIMS)]
    pushed.append(
        tenant.push({f"claims/{n}.yaml": claim(n, tenant.namespace) for n in names}, "many")
    )
    kube, namespace = (tenant.app, tenant.namespace)
    if watched == "control-plane":
        kube, namespace = tenant.control_plane, tenant.mapped
    arrived = first_arrivals(kube, namespace, seen=1)
    faults.kill(component)
    assert 0 < arrived < CLAIMS, f"the kill came after {arrived} of {CLAIMS} claims"
    time.sleep(OUTAGE)
    faults.start(component)

    expected = git_claims(tenant.remote)
    assert len(expected) == CLAIMS + 1
    eventually(lambda: mirrored(tenant, expected), "both clusters to converge", 180)
    for name in expected:
        report_ready(tenant, name)  # what the provider does on the Control Plane
    eventually(
        lambda: all(
            is_ready(o.get("status")) for o in tenant.app.list(POSTGRES, tenant.namespace)[0]
        ),
        "status in the App Cluster",
        120,
    )
    eventually(
        lambda: all(is_ready(doc.get("status")) for doc in git_claims(tenant.remote).values()),
        "status in Git",
        120,
    )

    history = commits(tenant.remote)
    assert lost(tenant.remote, pushed) == []
    assert duplicates(history) == []
    for name in expected:
        file = "claims/seed.yaml" if name == "seed" else f"claims/{name}.yaml"
        assert len(touching(history, file)) == 1, f"status of {name} committed more than once"
    assert mirrored(tenant, git_claims(tenant.remote))  # status commits changed no spec
    reconciler.wait_ready()
