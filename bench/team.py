"""Measurements 1 and 3 on one repository of N claims, each beside baselines from the same run:
cold full sync against ``kubectl apply --server-side`` into one cluster and a concurrent
server-side-apply writer into both (bench/ssa.py; the real Flux is bench/flux.py); Control Plane
status → App status and → status commit on main against one status write. The push latency (2)
is bench/pushes.py. bench/README.md describes each."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.claims import claim_file, claim_files, claim_name
from bench.measure import BenchFailure, Expect, Progress, converge, count
from bench.report import Figure, percentile
from bench.ssa import concurrent_apply
from bench.stack import Clusters
from klutch_gitops.config_file import defaults
from klutch_gitops.dev.localstack import binaries
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import NAMESPACES
from reconciler.manager import Reconciler
from tests.kit.claims import POSTGRES, ready_status, write_status
from tests.kit.git import remote_file, remote_head
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

DEFAULTS = defaults()  # the product's defaults, reported as used
KUBECTL_COLD = "kubectl apply --server-side -f, {n} files, one cluster"


@dataclass
class Team:
    """The one repository of measurements 1 to 3: its tenant (remote, a person's clone, the
    reconciler's config), and the kubectl baseline's namespace and files."""

    tenant: Tenant
    baseline_namespace: str
    baseline_dir: Path
    claims: int
    reconciler: Reconciler | None = None


def kubectl(kubeconfig: Path, cache: Path, *args: str) -> float:
    """Run kubectl against ``kubeconfig``; how long it took."""
    command = [str(binaries.require("kubectl")["kubectl"]), "--kubeconfig", str(kubeconfig)]
    env = {**os.environ, "KUBECACHEDIR": str(cache)}
    started = time.monotonic()
    result = subprocess.run([*command, *args], env=env, capture_output=True, text=True)
    took = time.monotonic() - started
    if result.returncode != 0:
        raise BenchFailure(f"kubectl {' '.join(args)} failed: {result.stderr.strip()[-500:]}")
    return took


def latency_figures(
    name: str, ours: list[float], baseline: str, theirs: list[float], note: str = ""
) -> list[Figure]:
    return [
        Figure(
            f"{name}, p{q}",
            "s",
            percentile(ours, q),
            f"{baseline}, p{q}",
            percentile(theirs, q),
            note=note if q == 50 else "",
            samples=ours if q == 50 else [],
        )
        for q in (50, 99)
    ]


# -- 1. cold full sync -----------------------------------------------------------------------


def prepare_team(clusters: Clusters, work: Path, claims: int) -> Team:
    """A bound consumer whose repository holds ``claims`` claims, its reconciler (the product's
    defaults) not started yet, and the same claims as files for the kubectl baseline."""
    (work / "team").mkdir(parents=True)
    tenant = make_tenant(
        clusters.info,
        clusters.apis,
        work / "team",
        start=False,
        seed=lambda namespace: claim_files(namespace, claims),
        quick=False,
        crds_installed=True,
    )
    baseline_namespace, baseline_dir = f"kubectl-{uuid.uuid4().hex[:6]}", work / "kubectl"
    for name, text in claim_files(baseline_namespace, claims).items():
        (baseline_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (baseline_dir / name).write_text(text)
    return Team(tenant, baseline_namespace, baseline_dir / "claims", claims)


def measure_cold_sync(
    clusters: Clusters, team: Team, work: Path, inflight: int, progress: Progress
) -> list[Figure]:
    """Ours, then kubectl into one cluster, then the concurrent writer into both with
    ``inflight`` requests in flight."""
    n, tenant = team.claims, team.tenant
    started = time.monotonic()
    team.reconciler = tenant.reconciler.start()
    done = converge(
        {
            "App": lambda: count(clusters.app, POSTGRES, tenant.namespace),
            "Control Plane": lambda: count(clusters.control_plane, POSTGRES, tenant.mapped),
        },
        n,
        timeout=120 + 0.5 * n,
        progress=lambda text: progress(f"cold sync of {n} claims: {text}"),
    )
    ours = max(done.values()) - started
    progress(f"kubectl apply --server-side of {n} files")
    namespace(clusters.app, team.baseline_namespace)
    theirs = kubectl(
        clusters.kubeconfig("app"),
        work / "kubectl-cache",
        "apply",
        "--server-side",
        "-f",
        str(team.baseline_dir),
    )
    progress(f"{inflight} server-side applies in flight, {n} claims into each cluster")
    writer = f"ssa-{uuid.uuid4().hex[:6]}"
    for kube in (clusters.app, clusters.control_plane):
        namespace(kube, writer)
    apis = {"app": clusters.app.api, "control-plane": clusters.control_plane.api}
    limit, cpu = concurrent_apply(apis, dict.fromkeys(apis, writer), n, inflight)
    for kube in (clusters.app, clusters.control_plane):
        if (got := count(kube, POSTGRES, writer)) != n:
            raise BenchFailure(f"the concurrent writer left {got} of {n} claims in {writer}")
    name = f"cold sync, {n} claims → App + CP"
    return [
        Figure(
            name,
            "s",
            ours,
            KUBECTL_COLD.format(n=n),
            theirs,
            note=f"App complete after {done['App'] - started:.2f} s",
        ),
        Figure(
            name,
            "s",
            ours,
            f"concurrent server-side-apply writer, {n} claims into each cluster",
            limit,
            note=f"{inflight} requests in flight (bench/ssa.py); the writer's CPU {cpu:.2f} s",
        ),
    ]


def namespace(kube: Kube, name: str) -> None:
    kube.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


# -- 3. Control Plane status → App and Git ---------------------------------------------------


def set_status(kube: Kube, name: str, namespace: str, host: str) -> float:
    """A provider's status write (status subresource, its own field manager); when it returned."""
    write_status(kube, name, namespace, ready_status(generation=None, host=host))
    return time.monotonic()


def committed(remote: Path, file: str, marker: str) -> Callable[[], bool]:
    """Whether main on ``remote`` holds ``marker`` in ``file``; git is asked only on a new head."""
    last = {"head": ""}

    def check() -> bool:
        head = remote_head(remote)
        if head == last["head"]:
            return False
        last["head"] = head
        return marker in remote_file(remote, file, head)

    return check


def measure_status(
    clusters: Clusters, team: Team, changes: int, progress: Progress
) -> list[Figure]:
    expect = Expect(clusters.app, POSTGRES, team.tenant.namespace, "bench-app").start()
    to_app, to_git, direct = [], [], []
    try:
        for k in range(changes):
            progress(f"status change {k + 1}/{changes}")
            index = k % team.claims
            name, host = claim_name(index), f"{claim_name(index)}.bench-{k}.example"
            expect.arm(
                lambda o, name=name, host=host: (
                    o["metadata"]["name"] == name and (o.get("status") or {}).get("host") == host
                )
            )
            written = set_status(clusters.control_plane, name, team.tenant.mapped, host)
            seen = expect.wait(f"status change {k + 1} in the App Cluster", 120)
            eventually(
                committed(team.tenant.remote, claim_file(index), host),
                f"status change {k + 1} in a commit on main",
                timeout=120,
                interval=0.02,
            )
            pushed = time.monotonic()
            to_app.append(seen - written)
            to_git.append(pushed - written)
            started = time.monotonic()
            direct.append(set_status(clusters.app, name, team.baseline_namespace, host) - started)
    finally:
        expect.stop()
    baseline = "status write on the App Cluster"
    return [
        *latency_figures("CP status → App status", to_app, baseline, direct, f"{changes} changes"),
        *latency_figures(
            "CP status → status commit on main",
            to_git,
            baseline,
            direct,
            f"batch window {DEFAULTS.batch_window:g} s (default)",
        ),
    ]
