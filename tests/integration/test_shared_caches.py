"""Two registrations in one reconciler share the App Cluster's informers (one watch per kind,
selected by our repository label and routed by its value) and never a tenant's Control Plane
cache (klutch_gitops/kube/shared.py). The clusters are the stack's real apiservers."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from klutch_gitops.kube.client import KubeError
from klutch_gitops.kube.resources import SECRETS
from reconciler.manager import Reconciler
from reconciler.sync.view import ClusterView
from tests.env import Env
from tests.kit.claims import POSTGRES, claim
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

KIND = f"{POSTGRES.plural}.{POSTGRES.group}"


def tenant(stack, clusters, directory: Path, name: str) -> Tenant:
    directory.mkdir()
    return make_tenant(
        stack,
        clusters,
        directory,
        start=False,
        seed=lambda namespace: {f"claims/{name}.yaml": claim(name, namespace)},
    )


def record(subscription: Any, seen: list[str]) -> None:
    """Note the namespace of every object the subscription's registration hears of."""
    handler: Callable[[str, dict], None] = subscription.handler

    def noting(event: str, obj: dict) -> None:
        seen.append(obj["metadata"]["namespace"])
        handler(event, obj)

    subscription.handler = noting


def names(objects: list[dict]) -> list[str]:
    return sorted(o["metadata"]["name"] for o in objects)


def threads_named(name: str) -> int:
    return sum(t.name == name for t in threading.enumerate())


@pytest.fixture
def pair(env: Env) -> tuple[Tenant, Tenant, Reconciler]:
    """Tenants a and b (one claim each) registered in one reconciler, both claims synced."""
    a = tenant(env.stack, env.clusters, env.tmp_path / "a", "db-a")
    b = tenant(env.stack, env.clusters, env.tmp_path / "b", "db-b")
    reconciler = Reconciler(env.config(repositories=(a.spec, b.spec)))
    env.cleanup.append(reconciler.stop)
    reconciler.start()
    for t, name in ((a, "db-a"), (b, "db-b")):
        eventually(lambda t=t, name=name: t.control_plane.get(POSTGRES, t.mapped, name), name)
    return a, b, reconciler


def test_registrations_share_app_informers_and_hear_only_their_own_objects(pair) -> None:
    a, b, reconciler = pair
    view_a = reconciler.syncs[a.spec.name].view
    view_b = reconciler.syncs[b.spec.name].view
    claims_a, claims_b = view_a.app_claim_caches[KIND], view_b.app_claim_caches[KIND]
    assert claims_a.shared is claims_b.shared
    assert view_a.app_secret_cache.shared is view_b.app_secret_cache.shared
    app_watches = [
        i
        for i in reconciler.resolver.caches.informers()
        if i.resource.plural == POSTGRES.plural and i.namespace is None
    ]
    assert app_watches == [claims_a.shared.informer]  # one watch of the kind for both
    assert threads_named(claims_a.shared.informer.name) == 1
    export = view_a.exports[(POSTGRES.group, POSTGRES.kind)]
    for view, name in ((view_a, "db-a"), (view_b, "db-b")):  # the watch may trail the apply
        eventually(lambda view=view: names(view.app_claims(export)), f"{name} in its cache")
        assert names(view.app_claims(export)) == [name]
    assert view_b.app_claim(export, a.namespace, "db-a") is None

    heard_a: list[str] = []
    heard_b: list[str] = []
    record(claims_a, heard_a)
    record(claims_b, heard_b)
    a.push({"claims/db-a.yaml": claim("db-a", a.namespace, plan="postgresql-single-small")})
    b.push({"claims/db-b.yaml": claim("db-b", b.namespace, plan="postgresql-single-small")})
    for t, name in ((a, "db-a"), (b, "db-b")):
        eventually(
            lambda t=t, name=name: (
                (t.control_plane.get(POSTGRES, t.mapped, name) or {})["spec"]["plan"]
                == "postgresql-single-small"
            ),
            f"{name}'s change on the Control Plane",
        )
    eventually(lambda: a.namespace in heard_a and b.namespace in heard_b, "the changes' events")
    assert set(heard_a) == {a.namespace}  # never b's objects
    assert set(heard_b) == {b.namespace}


def test_a_tenant_never_reads_another_tenants_control_plane_cache(pair) -> None:
    """The attack: a second registration with tenant b's binding names tenant a's App namespace
    (mapped to a's Control Plane namespace). Its Control Plane caches are b's identity's, which
    the Control Plane refuses there; a's cache of the same namespace is never lent to it. It
    shares the App informers with b's registration, whose cache keeps working once it stops."""
    a, b, reconciler = pair
    view_a = reconciler.syncs[a.spec.name].view
    view_b = reconciler.syncs[b.spec.name].view
    export = view_a.exports[(POSTGRES.group, POSTGRES.kind)]
    eventually(lambda: view_a.cp_claim(export, a.mapped, "db-a"), "db-a in a's CP cache")
    assert view_a.cp_claim_caches[(KIND, a.mapped)].shared is not (
        view_b.cp_claim_caches[(KIND, b.mapped)].shared
    )

    intruder = ClusterView(reconciler.resolver.connection(b.spec), False, lambda: None)
    try:
        intruder.list_exports()
        intruder.watch_kind(export)
        intruder.map_namespace(a.namespace, a.mapped)
        intruder.watch_mapped_claims()
        mine = intruder.cp_claim_caches[(KIND, a.mapped)]
        assert mine.shared is not view_a.cp_claim_caches[(KIND, a.mapped)].shared
        assert intruder.cp_secret_caches[a.mapped].shared is not (
            view_a.cp_secret_caches[a.mapped].shared
        )
        with pytest.raises(KubeError) as refused:  # what b's informer meets there
            intruder.cp.list(POSTGRES, a.mapped)
        assert refused.value.status == 403
        with pytest.raises(KubeError):
            intruder.cp.list(SECRETS, a.mapped)
        assert intruder.cp_claim(export, a.mapped, "db-a") is None
        assert not intruder.cp_secrets_synced(a.mapped)
        assert not mine.synced.is_set()
        # the App informer is b's registration's, routed to b's repository
        assert intruder.app_claim_caches[KIND].shared is view_b.app_claim_caches[KIND].shared
        assert names(intruder.app_claims(export)) == ["db-b"]
    finally:
        intruder.stop()

    shared = view_b.app_claim_caches[KIND].shared
    assert shared.informer in reconciler.resolver.caches.informers()  # b still holds it
    b.push({"claims/db-b2.yaml": claim("db-b2", b.namespace)})
    eventually(lambda: view_b.app_claim(export, b.namespace, "db-b2"), "db-b2 in b's cache")
    eventually(lambda: b.control_plane.get(POSTGRES, b.mapped, "db-b2"), "db-b2 on the CP")


def test_the_last_registration_to_stop_stops_the_informers(pair) -> None:
    _, _, reconciler = pair
    caches = reconciler.resolver.caches
    assert caches.informers()
    reconciler.stop()
    assert caches.informers() == []
