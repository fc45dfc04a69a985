"""A cold sync against the real stack (issue 17): the first pass asks for the namespace mapping,
waits for the answer of the namespace controller (reconciler/controllers/namespaces.py, which
writes ``status.namespace`` of the APIServiceNamespace) and writes every claim to both clusters in
that pass — each App object before its Control Plane copy — instead of writing the App Cluster,
re-queueing itself and writing the Control Plane in a second pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from klutch_gitops.kube.resources import EVENTS
from reconciler.sync import apply, events, namespaces, objects
from reconciler.sync.repository import Sync
from tests.kit.claims import POSTGRES, claim
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

CLAIMS = 3 * apply.APPLY_CONCURRENCY  # enough to keep both clusters' writers busy at once
NAMES = [f"db-{i:02d}" for i in range(CLAIMS)]


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """After each pass (in its worker, so before the next pass starts): how many claims the
    App namespace and the mapped Control Plane namespace hold."""
    seen: list[tuple[int, int]] = []
    original = Sync.sync

    def counted(sync: Sync) -> None:
        original(sync)
        mapped = sync.view.mapping.get(sync.spec.app_namespaces[0])
        app = sync.connection.app.list(POSTGRES, sync.spec.app_namespaces[0])[0]
        cp = sync.connection.control_plane.list(POSTGRES, mapped)[0] if mapped else []
        seen.append((len(app), len(cp)))

    monkeypatch.setattr(Sync, "sync", counted)
    # the behaviour, not the bound: a loaded machine's controller may take longer than 2 s
    monkeypatch.setattr(namespaces, "MAPPING_WAIT_SECONDS", 60.0)
    return seen


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path, passes: list[tuple[int, int]]) -> Iterator[Tenant]:
    world = make_tenant(
        stack,
        clusters,
        tmp_path,
        seed=lambda namespace: {f"claims/{n}.yaml": claim(n, namespace) for n in NAMES},
    )
    yield world
    world.reconciler.stop()


def test_the_first_pass_writes_every_claim_to_both_clusters(
    tenant: Tenant, passes: list[tuple[int, int]]
) -> None:
    eventually(lambda: passes, "the first pass", 120)
    print(f"claims in (App, Control Plane) after each pass so far: {passes}")
    assert passes[0] == (CLAIMS, CLAIMS)
    for name in NAMES:
        app = tenant.app.get(POSTGRES, tenant.namespace, name)
        assert app is not None
        assert objects.FINALIZER in app["metadata"]["finalizers"]
        assert tenant.control_plane.get(POSTGRES, tenant.mapped, name) is not None
    eventually(lambda: synced_events(tenant), "a Synced Event on every App object", 60)


def synced_events(tenant: Tenant) -> bool:
    """Every App object has the Normal Event that its Control Plane copy was written."""
    found = {
        e["involvedObject"]["name"]
        for e in tenant.app.list(EVENTS, tenant.namespace)[0]
        if e["reason"] == events.APPLIED
    }
    assert found == set(NAMES)
    return True
