"""A reconciler replica SIGKILLed while it holds shard Leases: the other replicas take its
repositories once the Leases expire, a push and a status change made meanwhile land, and the
killed replica, restarted as Kubernetes would, gets its share back — with no human commit lost,
no status commit twice and no orphan in either cluster."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

from kubernetes import client

from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import LEASES, NAMESPACES
from reconciler.ha.shards import ROLE_LABEL, shard_of
from tests.kit.claims import claim, git_claims, is_ready
from tests.kit.git import commits, duplicates, lost
from tests.kit.tenant import (
    Tenant,
    make_tenant,
    mirrored,
    reconciled,
    report_ready,
    repository_entry,
)
from tests.kit.wait import eventually

from .harness import ReconcilerProcess, config_for

SHARDS = 8
LEASE = "chaos-shards"


def holders(admin: Kube, namespace: str) -> dict[int, str]:
    """Each shard's holder identity (``POD_NAME_pid``), from its Lease."""
    leases, _ = admin.list(LEASES, namespace, label_selector=f"{ROLE_LABEL}=shard")
    held = {}
    for lease in leases:
        holder = lease["spec"].get("holderIdentity")
        if holder:
            held[int(lease["metadata"]["name"].removeprefix(f"{LEASE}-shard-"))] = holder
    return held


def test_a_killed_replicas_repositories_move_and_converge(
    stack: StackInfo, clusters: dict[str, client.ApiClient], tmp_path: Path
) -> None:
    admin = Kube(clusters["control-plane"])
    namespace = f"leases-{uuid.uuid4().hex[:6]}"
    admin.apply(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    homes = [tmp_path / f"tenant-{i}" for i in range(4)]
    for home in homes:
        home.mkdir()
    tenants: list[Tenant] = [make_tenant(stack, clusters, home, start=False) for home in homes]
    pushed = {
        t.namespace: [
            t.push({f"claims/{n}.yaml": claim(n, t.namespace) for n in ("a", "b")}, "two databases")
        ]
        for t in tenants
    }
    shared = {
        **config_for(tenants[0]),
        "repositories": [repository_entry(t.config.repositories[0]) for t in tenants],
        "leaderElection": {
            "enabled": True,
            "namespace": namespace,
            "name": LEASE,
            "shards": SHARDS,
            "leaseDuration": "3s",
            "renewDeadline": "2s",
            "retryPeriod": "200ms",
        },
    }
    replicas = {
        name: ReconcilerProcess(
            tmp_path / name,
            {
                **shared,
                "listen": f"127.0.0.1:{free_port()}",
                "workDir": str(tmp_path / name / "work"),
            },
            name=name,
        ).start()
        for name in ("r0", "r1", "r2")
    }
    try:
        for replica in replicas.values():
            replica.wait_ready()
        for t in tenants:
            eventually(
                lambda t=t: mirrored(t, git_claims(t.remote)), f"{t.namespace} mirrored", 120
            )
        eventually(lambda: len(holders(admin, namespace)) == SHARDS, "every shard held", 60)

        # The replica holding the most repositories' shards dies without a word.
        def holder_of(tenant: Tenant) -> str:
            shard = shard_of(tenant.config.repositories[0].name, SHARDS)
            return holders(admin, namespace)[shard].partition("_")[0]

        owners = Counter(holder_of(t) for t in tenants)
        victim = owners.most_common(1)[0][0]
        orphaned = [t for t in tenants if holder_of(t) == victim]
        replicas[victim].kill()

        # Meanwhile: a person adds a database, and the provider reports the others Ready.
        for t in orphaned:
            pushed[t.namespace].append(
                t.push({"claims/c.yaml": claim("c", t.namespace)}, "a third database")
            )
            for name in ("a", "b"):
                report_ready(t, name)

        survivors = set(replicas) - {victim}
        eventually(
            lambda: (
                len(held := holders(admin, namespace)) == SHARDS
                and {h.partition("_")[0] for h in held.values()} <= survivors
            ),
            "the survivors to hold every shard",
            60,
        )
        for t in orphaned:
            eventually(lambda t=t: mirrored(t, git_claims(t.remote)), f"{t.namespace}: c", 120)
            eventually(
                lambda t=t: all(is_ready(git_claims(t.remote)[n].get("status")) for n in "ab"),
                f"{t.namespace}: status in Git",
                120,
            )
            eventually(
                lambda t=t: reconciled(t) == pushed[t.namespace][-1], "the push reconciled", 120
            )

        # Restarted, it rejoins and takes shards back; a push to one of them lands.
        replicas[victim].start()
        replicas[victim].wait_ready()
        eventually(
            lambda: any(h.startswith(f"{victim}_") for h in holders(admin, namespace).values()),
            "the restarted replica to hold shards again",
            60,
        )
        for t in tenants:
            pushed[t.namespace].append(
                t.push({"claims/d.yaml": claim("d", t.namespace)}, "a fourth database")
            )
        for t in tenants:
            eventually(lambda t=t: mirrored(t, git_claims(t.remote)), f"{t.namespace}: d", 120)
            eventually(
                lambda t=t: reconciled(t) == pushed[t.namespace][-1],
                "the last push reconciled",
                120,
            )
    finally:
        for replica in replicas.values():
            replica.kill()

    for t in tenants:
        history = commits(t.remote)
        assert lost(t.remote, pushed[t.namespace]) == [], f"{t.namespace}: a human commit lost"
        assert duplicates(history) == [], f"{t.namespace}: a status commit twice"
        assert any(c.by_bot for c in history), f"{t.namespace}: no status commit"
