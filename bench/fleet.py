"""4. Many repositories on 1 and on N reconciler replicas, each replica a process of its own.

For each replica count, a fresh fleet (R bound consumers, R repositories of C claims) is synced
from cold by ``klutch-gitops run`` processes: with one replica the product's defaults, with more
``leaderElection`` with shards. Then, with nothing changing, the replicas' CPU is read over a
window; then one replica is SIGKILLed right before a push to one of its repositories and the time
until that change reaches the Control Plane is the hand-over (one replica: restarted at once, as
Kubernetes would).
"""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.claims import PLANS, claim_file, claim_files, claim_name
from bench.measure import BenchFailure, Expect, Progress, converge, count, vm_kib
from bench.replica import IDLE_IMPORTS, Replica, cpu_percent, idle_peak_kib
from bench.report import Figure
from bench.stack import Clusters
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.kube.resources import LEASES, NAMESPACES
from klutch_gitops.models.reconciler import LEASE_NAME
from reconciler.ha.shards import ROLE_LABEL, shard_lease, shard_of
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import clone_as_person, git, remote_head
from tests.kit.tenant import Tenant, make_tenant, repository_entry
from tests.kit.wait import eventually

SHARDS = 16
LEASE_DURATION = 15.0  # the product's default
SETTLE_SECONDS = 10.0  # after the last status commit, before the CPU window
CPU_WINDOW_SECONDS = 30.0


@dataclass
class Fleet:
    tenants: list[Tenant]

    @property
    def names(self) -> list[str]:
        """The registration names."""
        return [tenant.spec.name for tenant in self.tenants]

    @property
    def remotes(self) -> list[Path]:
        return [tenant.remote for tenant in self.tenants]

    @property
    def repositories(self) -> list[dict]:
        """The config file entries."""
        return [repository_entry(tenant.spec) for tenant in self.tenants]


def prepare_fleet(clusters: Clusters, work: Path, repos: int, claims: int) -> Fleet:
    """``repos`` bound consumers, each with a repository of ``claims`` claims."""
    tenants = []
    for r in range(repos):
        (work / f"repo-{r:03d}").mkdir()
        tenants.append(
            make_tenant(
                clusters.info,
                clusters.apis,
                work / f"repo-{r:03d}",
                start=False,
                seed=lambda namespace: claim_files(namespace, claims),
                quick=False,
                crds_installed=True,
            )
        )
    return Fleet(tenants)


def replicas_for(clusters: Clusters, fleet: Fleet, work: Path, count: int) -> list[Replica]:
    """Config files: one replica with the defaults, several with sharded leader election."""
    election = None
    if count > 1:
        namespace = f"bench-leases-{uuid.uuid4().hex[:4]}"
        clusters.control_plane.apply(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        )
        election = {"enabled": True, "namespace": namespace, "shards": SHARDS}
    replicas = []
    for index in range(count):
        config = work / f"replica-{index}.yaml"
        document = {
            "controlPlane": {"kubeconfig": str(clusters.kubeconfig("control-plane"))},
            "listen": f"127.0.0.1:{free_port()}",
            "workDir": str(work / f"replica-{index}"),
            "repositories": fleet.repositories,
        }
        if election:
            document["leaderElection"] = election
        config.write_text(yaml.safe_dump(document, sort_keys=False))
        replicas.append(Replica(f"bench-{index}", config, work / f"replica-{index}.log"))
    return replicas


def shard_holders(clusters: Clusters, replica: Replica) -> dict[int, str]:
    """Each shard's holder identity, from the Leases the replica's config names."""
    namespace = yaml.safe_load(replica.config.read_text())["leaderElection"]["namespace"]
    leases, _ = clusters.control_plane.list(LEASES, namespace, label_selector=f"{ROLE_LABEL}=shard")
    prefix = shard_lease(LEASE_NAME, 0).removesuffix("0")
    return {
        int(lease["metadata"]["name"].removeprefix(prefix)): lease["spec"]["holderIdentity"]
        for lease in leases
        if lease["spec"].get("holderIdentity")
    }


@dataclass
class FleetRun:
    replicas: int
    converge: float
    reported: float
    cpu_percent: float
    apiserver_cpu_percent: float
    peak_kib: list[int]
    handover: float
    leases_moved: float | None  # after the kill, until no shard Lease named the killed replica


def run_fleet(
    clusters: Clusters,
    work: Path,
    repos: int,
    claims: int,
    replica_count: int,
    apiservers: list[int],
    progress: Progress,
) -> FleetRun:
    label = f"{replica_count} replica{'s' if replica_count > 1 else ''}"
    total = repos * claims
    progress(f"{label}: binding {repos} consumers and seeding {repos} repositories")
    work.mkdir(parents=True)
    fleet = prepare_fleet(clusters, work, repos, claims)
    seeded = [remote_head(r) for r in fleet.remotes]
    counters = claim_counters(clusters)
    replicas = replicas_for(clusters, fleet, work, replica_count)
    started = time.monotonic()
    for replica in replicas:
        replica.start()

    def died() -> str | None:
        return next((problem for r in replicas if (problem := r.died())), None)

    try:
        done = converge(
            counters,
            total,
            timeout=300 + 0.2 * total,
            progress=lambda text: progress(f"{label}, {repos} x {claims}: {text}"),
            alive=died,
        )
        progress(f"{label}: waiting for a status commit in each of {repos} repositories")
        reported = status_commits(fleet.remotes, seeded, died)
        progress(f"{label}: steady state, CPU over {CPU_WINDOW_SECONDS:.0f} s")
        time.sleep(SETTLE_SECONDS)
        ours, apiserver_cpu = steady_cpu([r.pid for r in replicas], apiservers)
        if problem := died():
            raise BenchFailure(problem)
        for replica in replicas:
            replica.peak_kib = max(replica.peak_kib, vm_kib(replica.pid, "VmHWM") or 0)
        peaks = [r.peak_kib for r in replicas]
        progress(f"{label}: killing a replica before a push to one of its repositories")
        handover, leases_moved = measure_handover(clusters, fleet, replicas, work)
    finally:
        for replica in replicas:
            replica.stop()
    return FleetRun(
        replica_count,
        max(done.values()) - started,
        reported - started,
        ours,
        apiserver_cpu,
        peaks,
        handover,
        leases_moved,
    )


def claim_counters(clusters: Clusters) -> dict[str, Callable[[], int]]:
    """Per cluster, a counter of the claims it gained from now on (earlier runs' claims stay)."""
    counters: dict[str, Callable[[], int]] = {}
    for name, kube in (("App", clusters.app), ("Control Plane", clusters.control_plane)):
        before = count(kube, POSTGRES)
        counters[name] = lambda kube=kube, before=before: count(kube, POSTGRES) - before
    return counters


def status_commits(remotes: list[Path], seeded: list[str], died: Callable[[], str | None]) -> float:
    """When every remote's main had moved on from the seeded commit (the bot's status commit),
    all replicas alive."""
    eventually(
        lambda: (
            died() is None
            and all(remote_head(r) != s for r, s in zip(remotes, seeded, strict=True))
        ),
        "a status commit in every repository",
        timeout=300,
        interval=1.0,
    )
    return time.monotonic()


def steady_cpu(pids: list[int], apiservers: list[int]) -> tuple[float, float]:
    """The CPU of the replicas and of the kube-apiservers over the same window, % of one core."""
    window: dict[str, float] = {}
    watcher = threading.Thread(
        target=lambda: window.update(api=cpu_percent(apiservers, CPU_WINDOW_SECONDS))
    )
    watcher.start()
    ours = cpu_percent(pids, CPU_WINDOW_SECONDS)
    watcher.join()
    return ours, window["api"]


def measure_handover(
    clusters: Clusters, fleet: Fleet, replicas: list[Replica], work: Path
) -> tuple[float, float | None]:
    """SIGKILL a replica, push to one of its repositories at once, and time the change's
    arrival on the Control Plane: another replica's (or, alone, the restarted one's) work."""
    victim, index = replicas[0], 0
    if len(replicas) > 1:  # the replica holding the most repositories, and one of them
        held = shard_holders(clusters, replicas[0])
        holders = [held.get(shard_of(name, SHARDS)) for name in fleet.names]
        victim = max(replicas, key=lambda r: holders.count(r.identity))
        if victim.identity not in holders:
            raise BenchFailure("no replica holds a repository's shard")
        index = holders.index(victim.identity)
    tenant, remote = fleet.tenants[index], fleet.remotes[index]
    clone = work / "handover-clone"
    clone_as_person(str(remote), clone)
    (clone / claim_file(0)).write_text(claim(claim_name(0), tenant.namespace, PLANS[3]))
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "a change during the hand-over")
    expect = Expect(clusters.control_plane, POSTGRES, tenant.mapped, "handover").start()
    try:
        expect.arm(
            lambda obj: obj["metadata"]["name"] == claim_name(0) and obj["spec"]["plan"] == PLANS[3]
        )
        victim.kill()
        killed = time.monotonic()
        try:
            git(clone, "push", "-q", "origin", "HEAD:main")
        except subprocess.CalledProcessError as error:
            raise BenchFailure("the hand-over push was rejected") from error
        moved = None
        if len(replicas) == 1:
            victim.start()
        else:
            eventually(
                lambda: victim.identity not in shard_holders(clusters, victim).values(),
                "the killed replica's shard Leases to move",
                timeout=120,
                interval=0.2,
            )
            moved = time.monotonic()
        seen = expect.wait("the change after the hand-over", timeout=300)
    finally:
        expect.stop()
    return seen - killed, None if moved is None else moved - killed


def measure_fleets(
    clusters: Clusters,
    work: Path,
    repos: int,
    claims: int,
    replica_counts: list[int],
    kubectl_per_claim: float | None,
    progress: Progress,
) -> list[Figure]:
    """Every replica count on a fresh fleet; the first count is the others' baseline."""
    idle = idle_peak_kib()
    apiservers = [pid for name, pid in clusters.pids.items() if name.startswith("kube-apiserver")]
    runs = [
        run_fleet(clusters, work / f"fleet-{n}", repos, claims, n, apiservers, progress)
        for n in replica_counts
    ]
    scope = f"{repos} repos x {claims} claims"
    kubectl_total = kubectl_per_claim * repos * claims if kubectl_per_claim else None
    return [
        figure for run in runs for figure in fleet_figures(run, runs[0], scope, kubectl_total, idle)
    ]


def fleet_figures(
    run: FleetRun, first: FleetRun, scope: str, kubectl_total: float | None, idle: int
) -> list[Figure]:
    """The four figures of one replica count: beside (1)'s kubectl rate, the kube-apiservers,
    an idle Python and the lease duration for the first count, beside the first for others."""
    label = f"{run.replicas} replica{'s' if run.replicas > 1 else ''}"
    baseline = run is first
    return [
        Figure(
            f"full sync, {scope} → App + CP, {label}",
            "s",
            run.converge,
            "kubectl rate of (1), scaled to the same count"
            if baseline
            else f"{first.replicas} replica, same run",
            kubectl_total if baseline else first.converge,
            note=f"every repository had a status commit after {run.reported:.1f} s",
        ),
        Figure(
            f"steady-state CPU, nothing changing, {label} (all replicas)",
            "%",
            run.cpu_percent,
            "both kube-apiservers, same window"
            if baseline
            else f"{first.replicas} replica, same run",
            run.apiserver_cpu_percent if baseline else first.cpu_percent,
            note=f"{CPU_WINDOW_SECONDS:.0f} s window, % of one core; kube-apiservers "
            f"{run.apiserver_cpu_percent:.1f} %",
        ),
        Figure(
            f"peak RSS per replica, {label}",
            "MiB",
            max(run.peak_kib) / 1024,
            f"idle python importing {IDLE_IMPORTS.split(', ')[-1]}"
            if baseline
            else f"{first.replicas} replica, same run",
            idle / 1024 if baseline else max(first.peak_kib) / 1024,
            note="each: " + ", ".join(f"{kib / 1024:.0f}" for kib in run.peak_kib) + " MiB",
        ),
        Figure(
            f"hand-over after SIGKILL, {label}",
            "s",
            run.handover,
            "lease duration",
            LEASE_DURATION,
            note="killed, pushed at once; until the change is on the Control Plane"
            + (
                "; restarted at once, as Kubernetes would"
                if run.leases_moved is None
                else f"; its shard Leases held by others after {run.leases_moved:.1f} s"
            ),
        ),
    ]
