"""Measurements 1 to 3 on one repository of N claims, each beside a baseline from the same run:
cold full sync against ``kubectl apply --server-side``; ``git push`` → Control Plane copy against
the push itself and a one-file apply; Control Plane status → App status and → status commit on
main against one status write (bench/README.md describes each)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.claims import PLANS, claim_file, claim_files, claim_name
from bench.measure import BenchFailure, Expect, Progress, converge, count, timed_push
from bench.report import Figure, percentile
from bench.stack import Clusters
from klutch_gitops.config import Config
from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.testkit.claims import POSTGRES, claim, ready_status, write_status
from klutch_gitops.dev.testkit.git import git, remote_file, remote_head
from klutch_gitops.dev.testkit.tenant import Tenant, make_tenant
from klutch_gitops.dev.testkit.wait import eventually
from klutch_gitops.kube.client import NAMESPACES, Kube
from reconciler.manager import Reconciler
from reconciler.sync.notes import NOTES_REF
from reconciler.sync.writeback import TRAILER_RECONCILER

DEFAULTS = Config(control_plane_kubeconfig=Path())  # the product's defaults, reported as used
# Bot commits per human push before issue 15 (every push's sourceCommit in reconcile.yaml made a
# status commit): ``--quick --only push`` of that commit with this module's count; see README.
BEFORE_ISSUE_15, BEFORE_ISSUE_15_COMMIT, BEFORE_ISSUE_15_DATE = 0.8, "33fdef5", "2026-11-24"


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
    clusters: Clusters, team: Team, work: Path, progress: Progress
) -> list[Figure]:
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
    clusters.app.apply(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team.baseline_namespace}},
    )
    theirs = kubectl(
        clusters.kubeconfig("app"),
        work / "kubectl-cache",
        "apply",
        "--server-side",
        "-f",
        str(team.baseline_dir),
    )
    return [
        Figure(
            f"cold sync, {n} claims → App + CP",
            "s",
            ours,
            f"kubectl apply --server-side -f, {n} files, one cluster",
            theirs,
            note=f"App complete after {done['App'] - started:.2f} s",
        )
    ]


# -- 2. push → Control Plane copy ------------------------------------------------------------


def edit_claim(team: Team, index: int, plan: str) -> None:
    """Change one claim's plan in the person's clone and commit it (not pushed)."""
    clone = team.tenant.clone
    git(clone, "pull", "-q", "--rebase", "origin", "main")
    name = claim_name(index)
    path = clone / claim_file(index)
    text = path.read_text()
    path.write_text(text.replace(next(p for p in PLANS if f"plan: {p}\n" in text), plan, 1))
    git(clone, "commit", "-qam", f"{name}: plan {plan}")


def measure_pushes(
    clusters: Clusters, team: Team, pushes: int, work: Path, progress: Progress
) -> list[Figure]:
    expect = Expect(clusters.control_plane, POSTGRES, team.tenant.mapped, "bench-cp").start()
    latency, push, apply = [], [], []
    before = remote_head(team.tenant.remote)
    try:
        for k in range(pushes):
            progress(f"push {k + 1}/{pushes}")
            index, plan = k % team.claims, PLANS[(k // team.claims + 1) % len(PLANS)]
            edit_claim(team, index, plan)
            name = claim_name(index)
            expect.arm(
                lambda o, name=name, plan=plan: (
                    o["metadata"]["name"] == name and o["spec"].get("plan") == plan
                )
            )
            took, pushed = timed_push(team.tenant.clone)
            seen = expect.wait(f"push {k + 1}: the Control Plane copy with plan {plan}", 120)
            latency.append(seen - pushed)
            push.append(took)
            baseline = team.baseline_dir / f"{claim_name(index)}.yaml"
            baseline.write_text(claim(claim_name(index), team.baseline_namespace, plan))
            apply.append(
                kubectl(
                    clusters.kubeconfig("app"),
                    work / "kubectl-cache",
                    "apply",
                    "--server-side",
                    "-f",
                    str(baseline),
                )
            )
    finally:
        expect.stop()
    name = f"push → CP copy ({team.claims}-claim repo)"
    return [
        *latency_figures(name, latency, "git push", push, f"{pushes} pushes"),
        *latency_figures(name, latency, "kubectl apply --server-side, 1 file", apply),
        bot_commits_per_push(team, before, pushes),
    ]


def bot_commits_per_push(team: Team, before: str, pushes: int) -> Figure:
    """Status commits on main per human push of the push measurement (each changes one claim's
    plan; no provider changes a status), once the last push is noted as reconciled, so its
    write-back has decided. Issue 15: only a change of status or refusals makes a commit."""
    tenant = team.tenant
    last = git(tenant.clone, "rev-parse", "HEAD")

    def noted() -> bool:
        try:
            note = git(tenant.remote, "notes", f"--ref={NOTES_REF}", "show", last)
        except subprocess.CalledProcessError:
            return False
        return tenant.spec.name in note

    eventually(noted, "the last push noted as reconciled", timeout=120)
    bots = git(
        tenant.remote, "rev-list", f"--grep=^{TRAILER_RECONCILER}: ", f"{before}..main"
    ).split()
    return Figure(
        "bot commits per human push",
        "commits",
        len(bots) / pushes,
        f"{BEFORE_ISSUE_15_COMMIT} (before issue 15), measured {BEFORE_ISSUE_15_DATE}",
        BEFORE_ISSUE_15,
        note=f"{len(bots)} status commits for {pushes} pushes",
    )


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
