"""Reconciler replicas sharing repositories through shard Leases on the real Control Plane.

Every repository is worked on by exactly one replica at a time, every replica is Ready and takes
webhooks, a push that reaches another replica's shard is fetched by its holder, and repositories
move when a replica leaves or joins — with every claim converged and no status commit twice.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client

from bind_api.bindings import BINDER_SECRET
from klutch_gitops.config import LeaderElection, RegistrationSpec, SecretRef
from klutch_gitops.config_file import config_from, defaults
from klutch_gitops.consumer import binder_kubeconfig
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.resources import LEASES
from reconciler.ha.shards import FETCH_ANNOTATION, ROLE_LABEL, shard_lease, shard_of
from reconciler.manager import Reconciler
from tests.conftest import TwinNamespace
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.tenant import WEBHOOK_SECRET, Tenant, make_tenant
from tests.kit.wait import eventually

from .test_token_renewal import write_binder_secret

SHARDS = 8
# Short, so hand-overs stay quick; the checks only wait, never time anything.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.2


def sharded(namespace: str) -> LeaderElection:
    return replace(
        defaults().leader_election,
        enabled=True,
        namespace=namespace,
        name=f"shards-{uuid.uuid4().hex[:6]}",
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
        shards=SHARDS,
    )


class Replicas:
    """In-process reconciler replicas with one registration list and one set of Leases."""

    def __init__(
        self,
        stack: StackInfo,
        repositories: tuple[RegistrationSpec, ...],
        election: LeaderElection,
        root: Path,
    ):
        self.stack = stack
        self.repositories = repositories
        self.election = election
        self.root = root
        self.running: dict[str, Reconciler] = {}
        self.exits: dict[str, list[int]] = {}

    def start(self, name: str) -> Reconciler:
        self.exits[name] = []
        replica = Reconciler(
            config_from(
                Path(self.stack.clusters["control-plane"].kubeconfig),
                repositories=self.repositories,
                listen=f"127.0.0.1:{free_port()}",
                poll_interval=3600.0,  # pushes arrive by file watching and webhooks only
                batch_window=0.3,
                workers=2,
                work_dir=self.root / name,
                leader_election=self.election,
            ),
            identity=name,
            exit_process=self.exits[name].append,
        ).start()
        self.running[name] = replica
        return replica

    def stop(self, name: str) -> None:
        self.running.pop(name).stop()

    def owners(self, repository: str) -> list[str]:
        return [name for name, replica in self.running.items() if repository in replica.syncs]

    def held(self) -> list[set[int]]:
        """The shards each running replica holds."""
        return [set(r.shards.held()) for r in self.running.values() if r.shards is not None]

    def each_owned_once(self) -> bool:
        return all(len(self.owners(r.name)) == 1 for r in self.repositories)


@pytest.fixture
def fleet(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    tmp_path: Path,
) -> Iterator[tuple[list[Tenant], Replicas]]:
    homes = [tmp_path / f"t{i}" for i in range(4)]
    for home in homes:
        home.mkdir()
    tenants = [make_tenant(stack, clusters, home, start=False) for home in homes]
    election = sharded(namespace.name)
    repositories = tuple(t.config.repositories[0] for t in tenants)
    replicas = Replicas(stack, repositories, election, tmp_path / "replicas")
    yield tenants, replicas
    for name in list(replicas.running):
        replicas.stop(name)


def settled_owner(replicas: Replicas, repository: str) -> str | None:
    """The one replica on ``repository`` once every replica sees every other and none holds a
    shard that is not its own (replicas started one after another hand shards over first)."""
    held = replicas.held()
    owners = replicas.owners(repository)
    settled = sum(len(h) for h in held) == SHARDS and all(h for h in held)
    return owners[0] if settled and len(owners) == 1 else None


def converged(tenant: Tenant, name: str, plan: str) -> bool:
    app = tenant.app.get(POSTGRES, tenant.namespace, name)
    upstream = tenant.control_plane.get(POSTGRES, tenant.mapped, name)
    return bool(app and upstream and upstream["spec"]["plan"] == plan)


def bot_patches(tenant: Tenant) -> list[str]:
    """A hash of every bot commit's diff: two equal ones would be one status written twice."""
    shas = git(tenant.remote, "log", "--format=%H", "--author=klutch-gitops", "main").split()
    return [
        hashlib.sha256(git(tenant.remote, "show", "--format=", sha).encode()).hexdigest()
        for sha in shas
    ]


def test_replicas_share_repositories_and_hand_them_over(
    fleet: tuple[list[Tenant], Replicas],
) -> None:
    tenants, replicas = fleet
    for tenant in tenants:
        tenant.push({"claims/orders.yaml": claim("orders", tenant.namespace)})
    for name in ("a", "b", "c"):
        replicas.start(name)

    eventually(replicas.each_owned_once, "every repository on one replica", timeout=60)
    for tenant in tenants:
        eventually(
            lambda t=tenant: converged(t, "orders", "postgresql-single-nano"),
            f"{tenant.namespace}: the claim in both clusters",
            timeout=60,
        )
    for _ in range(25):  # several renewals: never two replicas on one repository
        assert all(len(replicas.owners(r.name)) <= 1 for r in replicas.repositories)
        time.sleep(RETRY_PERIOD)
    leaders = [n for n, r in replicas.running.items() if r.leading]
    assert len(leaders) == 1  # the cluster-wide controllers run once
    for replica in replicas.running.values():
        eventually(lambda r=replica: r.waiting() == [], "every replica ready", timeout=60)

    # A webhook that reaches a replica not holding the repository stamps its shard's Lease.
    tenant = tenants[0]
    name = tenant.config.repositories[0].name
    [owner] = replicas.owners(name)
    other = next(n for n in replicas.running if n != owner)
    tenant.push(
        {"claims/orders.yaml": claim("orders", tenant.namespace, "postgresql-single-small")}
    )
    body = json.dumps(
        {
            "ref": "refs/heads/main",
            "after": git(tenant.remote, "rev-parse", "main"),
            "repository": {"clone_url": f"file://{tenant.remote}"},
        }
    ).encode()
    signature = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    answer = httpx.post(
        f"http://{replicas.running[other].config.listen}/webhooks/gitea",
        content=body,
        headers={"X-Gitea-Event": "push", "X-Gitea-Signature": signature},
    )
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"triggered": 1}
    election = replicas.election
    lease = tenant.control_plane.get(
        LEASES, election.namespace, shard_lease(election.name, shard_of(name, SHARDS))
    )
    assert other in lease["metadata"]["annotations"][FETCH_ANNOTATION]
    eventually(
        lambda: converged(tenant, "orders", "postgresql-single-small"),
        "the pushed change",
        timeout=60,
    )

    # A clean stop hands the owner's repositories over; a push to one of them converges.
    replicas.stop(owner)
    eventually(replicas.each_owned_once, "the repositories to move", timeout=60)
    assert owner not in replicas.owners(name)
    tenant.push(
        {"claims/orders.yaml": claim("orders", tenant.namespace, "postgresql-single-medium")}
    )
    eventually(
        lambda: converged(tenant, "orders", "postgresql-single-medium"),
        "the change after",
        timeout=60,
    )

    # A replica that joins takes shards over from the others, one drained hand-over each.
    replicas.start("d")
    eventually(
        lambda: replicas.running["d"].shards is not None and replicas.running["d"].shards.held(),
        "the new replica to hold shards",
        timeout=60,
    )
    eventually(replicas.each_owned_once, "every repository on one replica again", timeout=60)
    eventually(  # a shard being handed over is held by nobody for a round
        lambda: set().union(*replicas.held()) == set(range(SHARDS)), "every shard held", 60
    )
    held = replicas.held()
    assert set().union(*held) == set(range(SHARDS))
    assert sum(len(h) for h in held) == SHARDS  # no shard held twice
    leases, _ = tenant.control_plane.list(
        LEASES, election.namespace, label_selector=f"{ROLE_LABEL}=member"
    )
    assert len(leases) == len(replicas.running)  # the stopped replica left

    for tenant in tenants:
        patches = bot_patches(tenant)
        assert len(patches) == len(set(patches)), f"{tenant.namespace}: a status commit twice"
    assert all(exits == [] for exits in replicas.exits.values())


def test_a_changed_binder_secret_restarts_the_registration_where_it_is_held(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    tmp_path: Path,
) -> None:
    """The leader renews binder tokens, but another replica may hold the repository that uses
    one: that replica must restart it with the new token."""
    tenant = make_tenant(stack, clusters, tmp_path, start=False)
    admin = tenant.control_plane
    write_binder_secret(
        admin, tenant.consumer, yaml.safe_dump(binder_kubeconfig(admin, tenant.consumer, 600))
    )
    spec = replace(
        tenant.config.repositories[0],
        control_plane_kubeconfig=SecretRef(
            namespace=tenant.consumer, name=BINDER_SECRET, key="kubeconfig"
        ),
    )
    election = sharded(namespace.name)
    replicas = Replicas(stack, (spec,), election, tmp_path / "replicas")
    try:
        for name in ("a", "b"):
            replicas.start(name)
        tenant.push({"claims/orders.yaml": claim("orders", tenant.namespace)})
        eventually(
            lambda: converged(tenant, "orders", "postgresql-single-nano"), "the claim", timeout=60
        )
        owner = eventually(lambda: settled_owner(replicas, spec.name), "one settled holder", 60)
        before = replicas.running[owner].syncs[spec.name]

        renewed = binder_kubeconfig(admin, tenant.consumer, 900)
        write_binder_secret(admin, tenant.consumer, yaml.safe_dump(renewed))
        eventually(
            lambda: replicas.running[owner].syncs.get(spec.name) not in (None, before),
            "the holder to restart the registration",
            timeout=60,
        )
        token = renewed["users"][0]["user"]["token"]
        restarted = replicas.running[owner].syncs[spec.name]
        assert restarted.connection.control_plane.api.configuration.api_key["BearerToken"] == (
            f"Bearer {token}"
        )
        assert replicas.owners(spec.name) == [owner]
        tenant.push(
            {"claims/orders.yaml": claim("orders", tenant.namespace, "postgresql-single-big")}
        )
        eventually(
            lambda: converged(tenant, "orders", "postgresql-single-big"), "a change after", 60
        )
    finally:
        for name in list(replicas.running):
            replicas.stop(name)
