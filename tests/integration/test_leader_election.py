"""Leader election on the real Control Plane: of two candidates on one Lease exactly one leads, a
clean stop hands over, a leader whose Lease is taken steps down, a standby reconciler is not
ready, and the chart's Role is all an elector needs."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client

from klutch_gitops.config import LeaderElection
from klutch_gitops.config_file import config_from, defaults
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import LEASES
from reconciler.ha.leader import LeaderElector, format_time
from reconciler.ha.shards import GROUP_LABEL, ROLE_LABEL, ShardCoordinator, member_lease
from reconciler.manager import STANDBY, Reconciler
from tests.conftest import TwinNamespace
from tests.helm import VALUE_SETS, render
from tests.kit.wait import eventually

from .test_chart import by_component, identity, kubectl, local_values

# Short, so a takeover after an expiry stays quick; the checks only wait, never time anything.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 3.0, 2.0, 0.2


class Candidate:
    """An elector that records its callbacks."""

    def __init__(self, kube: Kube, settings: LeaderElection, name: str) -> None:
        self.started = 0
        self.lost = 0
        self.elector = LeaderElector(kube, settings, name, self._start, self._lose)

    def _start(self) -> None:
        self.started += 1

    def _lose(self) -> None:
        self.lost += 1

    @property
    def leading(self) -> bool:
        return self.elector.leading.is_set()


def settings(namespace: str) -> LeaderElection:
    return replace(
        defaults().leader_election,
        enabled=True,
        namespace=namespace,
        name=f"lease-{uuid.uuid4().hex[:6]}",
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
    )


@pytest.fixture
def candidates(
    clusters: dict[str, client.ApiClient], namespace: TwinNamespace
) -> Iterator[tuple[Kube, LeaderElection, list[Candidate]]]:
    kube = Kube(clusters["control-plane"])
    election = settings(namespace.name)
    both = [Candidate(kube, election, name) for name in ("first", "second")]
    for candidate in both:
        candidate.elector.start()
    yield kube, election, both
    for candidate in both:
        candidate.elector.stop()


def holder(kube: Kube, election: LeaderElection) -> str | None:
    lease = kube.get(LEASES, election.namespace, election.name)
    return ((lease or {}).get("spec") or {}).get("holderIdentity")


def steal(kube: Kube, election: LeaderElection) -> None:
    """A forced update (a merge patch names no resourceVersion): "thief" holds it for an hour."""
    spec = {
        "holderIdentity": "thief",
        "renewTime": format_time(datetime.now(UTC)),
        "leaseDurationSeconds": 3600,
    }
    kube.patch(LEASES, election.namespace, election.name, {"spec": spec})


def test_exactly_one_leads_and_a_clean_stop_hands_over(
    candidates: tuple[Kube, LeaderElection, list[Candidate]],
) -> None:
    kube, election, both = candidates
    [leader] = eventually(lambda: [c for c in both if c.leading], "one leader", timeout=60)
    [standby] = [c for c in both if c is not leader]
    for _ in range(20):  # several renewals: the standby never leads alongside
        assert leader.leading
        assert not standby.leading
        time.sleep(RETRY_PERIOD)
    assert (leader.started, standby.started) == (1, 0)
    assert holder(kube, election) == leader.elector.identity

    leader.elector.stop()
    assert not leader.leading
    eventually(lambda: standby.leading, "the standby to take over", timeout=60)
    assert holder(kube, election) == standby.elector.identity
    lease = kube.get(LEASES, election.namespace, election.name)
    assert lease is not None
    assert lease["spec"]["leaseTransitions"] >= 1
    assert (leader.lost, standby.lost) == (0, 0)  # a clean stop is no loss


def test_a_leader_whose_lease_is_taken_steps_down(
    candidates: tuple[Kube, LeaderElection, list[Candidate]],
) -> None:
    kube, election, both = candidates
    [leader] = eventually(lambda: [c for c in both if c.leading], "one leader", timeout=60)
    steal(kube, election)

    eventually(lambda: leader.lost == 1, "the leader to step down", timeout=60)
    assert not any(c.leading for c in both)  # the thief's lease is valid for an hour
    assert holder(kube, election) == "thief"


def test_only_the_leading_reconciler_works_and_a_standby_is_not_ready(
    stack: StackInfo, namespace: TwinNamespace, tmp_path: Path
) -> None:
    election = settings(namespace.name)
    exits: dict[str, list[int]] = {"a": [], "b": []}
    reconcilers = {
        name: Reconciler(
            config_from(
                Path(stack.clusters["control-plane"].kubeconfig),
                listen=f"127.0.0.1:{free_port()}",
                work_dir=tmp_path / name,
                leader_election=election,
            ),
            identity=name,
            exit_process=exits[name].append,
        ).start()
        for name in ("a", "b")
    }
    try:

        def roles() -> tuple[str, str] | None:
            leading = [
                name
                for name, reconciler in reconcilers.items()
                if reconciler.elector and reconciler.elector.leading.is_set()
            ]
            return (leading[0], "b" if leading[0] == "a" else "a") if len(leading) == 1 else None

        leader, standby = eventually(roles, "one leading reconciler", timeout=60)
        eventually(lambda: reconcilers[leader].leading, "the leader to start working", timeout=60)
        assert not reconcilers[standby].leading
        assert reconcilers[standby].waiting() == [STANDBY]

        def readyz(name: str) -> httpx.Response | None:
            try:
                return httpx.get(f"http://{reconcilers[name].config.listen}/readyz", timeout=5)
            except httpx.TransportError:
                return None  # not listening yet

        response = eventually(lambda: readyz(standby), "the standby's /readyz", timeout=30)
        assert response.status_code == 503
        assert response.json() == {"ready": False, "waiting": 1}  # the reason: with the token
        eventually(
            lambda: (ready := readyz(leader)) is not None and ready.status_code == 200,
            "the leader to be ready",
            timeout=60,
        )

        reconcilers[leader].stop()  # releases the Lease: the standby takes over and works
        eventually(
            lambda: reconcilers[standby].leading and reconcilers[standby].waiting() == [],
            "the standby to take over and be ready",
            timeout=60,
        )
        assert exits == {"a": [], "b": []}

        steal(reconcilers[standby].admin, election)
        eventually(lambda: exits[standby] == [1], "the new leader to exit", timeout=60)
    finally:
        for reconciler in reconcilers.values():
            reconciler.stop()


def chart_identity(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    tmp_path: Path,
    values: str,
) -> tuple[LeaderElection, Kube]:
    """Apply the chart's RBAC for ``values`` and act as its reconciler ServiceAccount, with the
    Lease settings of its config (durations shortened)."""
    local = local_values(stack, tmp_path)
    release = f"lease-{uuid.uuid4().hex[:6]}"
    docs = render([VALUE_SETS[values], local], namespace=namespace.name, release=release)
    rbac = [doc for doc in docs if doc["kind"] in {"ServiceAccount", "Role", "RoleBinding"}]
    applied = kubectl(stack, rbac, "apply", "--server-side", "--field-manager=helm", "-f", "-")
    assert applied.returncode == 0, applied.stderr
    config_map = by_component(docs, "ConfigMap", "reconciler")
    config = yaml.safe_load(config_map["data"]["reconciler.yaml"])["leaderElection"]
    election = replace(
        defaults().leader_election,
        enabled=True,
        namespace=config["namespace"],
        name=config["name"],
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
        shards=config.get("shards", 0),
    )
    as_reconciler = identity(
        Kube(clusters["control-plane"]),
        by_component(docs, "ConfigMap", "kubeconfig")["data"]["kubeconfig"],
        by_component(docs, "ServiceAccount", "reconciler"),
        tmp_path / "reconciler",
    )
    return election, as_reconciler


def test_the_charts_role_is_all_an_elector_needs(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    tmp_path: Path,
) -> None:
    election, as_reconciler = chart_identity(stack, clusters, namespace, tmp_path, "replicas")
    candidate = Candidate(as_reconciler, election, "pod-0")
    candidate.elector.start()
    try:
        eventually(lambda: candidate.leading, "the chart's identity to lead", timeout=60)
        time.sleep(5 * RETRY_PERIOD)  # renewals (updates) are allowed too
        assert candidate.leading
        assert candidate.lost == 0
    finally:
        candidate.elector.stop()
    assert not holder(Kube(clusters["control-plane"]), election)  # released


def test_the_charts_role_is_all_a_sharded_replica_needs(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    tmp_path: Path,
) -> None:
    """Every Lease call of a replica: member and shard Leases created, listed, renewed, a shard
    stamped, a stale member deleted, all released."""
    election, as_reconciler = chart_identity(stack, clusters, namespace, tmp_path, "shards")
    admin = Kube(clusters["control-plane"])
    stale = datetime.now(UTC) - timedelta(hours=1)
    admin.create(
        LEASES,
        {
            "apiVersion": LEASES.api_version,
            "kind": LEASES.kind,
            "metadata": {
                "namespace": election.namespace,
                "name": member_lease(election.name, "gone_1"),
                "labels": {GROUP_LABEL: election.name, ROLE_LABEL: "member"},
            },
            "spec": {
                "holderIdentity": "gone_1",
                "leaseDurationSeconds": 3,
                "renewTime": format_time(stale),
            },
        },
    )
    failures: list[str] = []
    replica = ShardCoordinator(
        as_reconciler,
        election,
        "pod-0_1",
        lambda _shard: None,
        lambda _shard: None,
        lambda _shard: None,
        lambda: failures.append("lost"),
    ).start()
    try:
        eventually(
            lambda: replica.held() == list(range(election.shards)), "every shard", timeout=60
        )
        replica.request_fetch(0)
        time.sleep(5 * RETRY_PERIOD)  # renewals after the stamp
        assert replica.held() == list(range(election.shards))
        assert admin.get(LEASES, election.namespace, member_lease(election.name, "gone_1")) is None
    finally:
        replica.stop()
    assert failures == []
    leases, _ = admin.list(LEASES, election.namespace, label_selector=f"{ROLE_LABEL}=shard")
    assert len(leases) == election.shards
    assert not any(lease["spec"].get("holderIdentity") for lease in leases)  # released
    assert admin.get(LEASES, election.namespace, member_lease(election.name, "pod-0_1")) is None
