"""A replica taking a shard over starts with the repository that has a push nobody applied yet.

One replica reconciles a shard of three repositories and records in the shard Lease the commit
each last passed; it leaves, a push lands in the last of them while nobody holds the shard, and
the replica that takes the shard registers and passes that repository before the other two, which
a plain order (the registrations' own) would put first. The checks wait and compare orders, never
time anything.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from kubernetes import client

import reconciler.manager as manager
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.resources import LEASES
from reconciler.ha.records import read_record
from reconciler.ha.shards import shard_lease
from reconciler.registrations import Registrations
from reconciler.work import Key
from tests.conftest import TwinNamespace
from tests.kit.claims import claim
from tests.kit.git import git
from tests.kit.tenant import make_tenant
from tests.kit.wait import eventually

from .test_shards import Replicas, converged, sharded


def test_a_taken_shard_starts_with_the_repository_that_has_a_push_pending(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One registration at a time, so the order they start in is the queue's, not a race's.
    monkeypatch.setattr(manager, "REGISTRATION_WORKERS", 1)
    homes = [tmp_path / f"t{i}" for i in range(3)]
    for home in homes:
        home.mkdir()
    tenants = [make_tenant(stack, clusters, home, start=False) for home in homes]
    for tenant in tenants:
        tenant.push({"claims/orders.yaml": claim("orders", tenant.namespace)})
    election = replace(sharded(namespace.name), shards=1)  # one shard holds all three
    names = [t.config.repositories[0].name for t in tenants]
    replicas = Replicas(
        stack, tuple(t.config.repositories[0] for t in tenants), election, tmp_path / "r"
    )
    try:
        replicas.start("a")
        for tenant in tenants:
            eventually(
                lambda t=tenant: converged(t, "orders", "postgresql-single-nano"),
                f"{tenant.namespace}: the claim in both clusters",
                timeout=90,
            )
        control_plane = tenants[0].control_plane

        def record() -> dict[str, str]:
            lease = control_plane.get(LEASES, election.namespace, shard_lease(election.name, 0))
            return read_record(lease)

        def heads() -> dict[str, str]:
            return {
                n: git(t.remote, "rev-parse", "main") for n, t in zip(names, tenants, strict=True)
            }

        quiet: list[bool] = []

        def settled() -> bool:
            """Every head passed and recorded, status commits included, five looks in a row:
            a status change still coming would push a head the record has not seen yet."""
            quiet.append(record() == heads())
            return len(quiet) >= 5 and all(quiet[-5:])

        eventually(settled, "the shard Lease to record every head", timeout=120, interval=1.0)
        replicas.stop("a")  # releases the shard; its Lease keeps the record
        # A status commit pushed after all would be pending too: those go first as well.
        stale = {n for n, head in heads().items() if record().get(n) != head}
        pushed_name = [n for n in names if n not in stale][-1]  # last in the plain order
        pushed = tenants[names.index(pushed_name)]
        first = {pushed_name, *stale}
        pushed.push(
            {"claims/orders.yaml": claim("orders", pushed.namespace, "postgresql-single-small")}
        )
        handled: list[Key] = []
        handle = Registrations.handle

        def recording(self: Registrations, key: Key) -> None:
            if self.owned(key[1]):  # at its start a replica looks at every registration once
                handled.append(key)  # taken by a worker, before it runs
            handle(self, key)

        monkeypatch.setattr(Registrations, "handle", recording)
        replicas.start("b")
        eventually(
            lambda: converged(pushed, "orders", "postgresql-single-small"),
            "the push made while nobody held the shard",
            timeout=90,
        )
        eventually(
            lambda: {("sync", n) for n in names} <= set(handled),
            "a first pass of every repository",
            timeout=90,
        )
        registered = [name for kind, name in handled if kind == "register"]
        passed = [name for kind, name in handled if kind == "sync"]
        assert set(registered[: len(first)]) == first, registered
        assert set(passed[: len(first)]) == first, passed
        assert sorted(registered) == sorted(names)  # each once
    finally:
        for name in list(replicas.running):
            replicas.stop(name)
