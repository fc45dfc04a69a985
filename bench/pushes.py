"""Measurement 2: ``git push`` → Control Plane copy at several repository sizes in one run, each
push beside the push itself and a one-file ``kubectl apply --server-side``; and the bot commits
per human push (bench/README.md describes both).

The sizes share the one repository of the cold sync: before each size's pushes one commit adds
(or removes) the claim files that make up the difference and the run waits until both clusters
hold exactly that many, so 5,000 claims cost one growth from 1,000, not a cold sync of their own.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from bench.claims import PLANS, claim_file, claim_files, claim_name
from bench.measure import Expect, Progress, converge, count, timed_push
from bench.report import Figure
from bench.stack import Clusters
from bench.team import Team, kubectl, latency_figures
from reconciler.sync.notes import NOTES_REF
from reconciler.sync.writeback import TRAILER_RECONCILER
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git, remote_head
from tests.kit.wait import eventually

# Bot commits per human push before issue 15 (every push's sourceCommit in reconcile.yaml made a
# status commit): ``--quick --only push`` of that commit with this module's count; see README.
BEFORE_ISSUE_15, BEFORE_ISSUE_15_COMMIT, BEFORE_ISSUE_15_DATE = 0.8, "33fdef5", "2026-11-24"


def edit_claim(team: Team, index: int) -> str:
    """Move one claim to the next plan in the person's clone and commit it (not pushed); the
    new plan."""
    clone = team.tenant.clone
    git(clone, "pull", "-q", "--rebase", "origin", "main")
    name = claim_name(index)
    path = clone / claim_file(index)
    text = path.read_text()
    current = next(p for p in PLANS if f"plan: {p}\n" in text)
    plan = PLANS[(PLANS.index(current) + 1) % len(PLANS)]
    path.write_text(text.replace(f"plan: {current}\n", f"plan: {plan}\n", 1))
    git(clone, "commit", "-qam", f"{name}: plan {plan}")
    return plan


def resize(clusters: Clusters, team: Team, size: int, progress: Progress) -> float:
    """Grow or shrink the repository to ``size`` claims in one pushed commit and wait until both
    clusters hold exactly ``size``; seconds from the push to that."""
    tenant, clone, current = team.tenant, team.tenant.clone, team.claims
    git(clone, "pull", "-q", "--rebase", "origin", "main")
    if size > current:
        for name, text in claim_files(tenant.namespace, size - current, start=current).items():
            (clone / name).write_text(text)
        git(clone, "add", "claims")
    else:
        git(clone, "rm", "-q", *(claim_file(i) for i in range(size, current)))
    git(clone, "commit", "-qm", f"{size} claims")
    _, pushed = timed_push(clone)
    done = converge(
        {
            "App": lambda: count(clusters.app, POSTGRES, tenant.namespace),
            "Control Plane": lambda: count(clusters.control_plane, POSTGRES, tenant.mapped),
        },
        size,
        timeout=120 + 0.5 * abs(size - current),
        progress=lambda text: progress(f"{current} → {size} claims: {text}"),
        exact=True,
    )
    team.claims = size
    return max(done.values()) - pushed


def push_round(
    clusters: Clusters, team: Team, expect: Expect, pushes: int, work: Path, progress: Progress
) -> tuple[list[float], list[float], list[float]]:
    """``pushes`` one-claim changes: push → CP copy, the push itself, the kubectl baseline."""
    latency, push, apply = [], [], []
    for k in range(pushes):
        progress(f"{team.claims} claims, push {k + 1}/{pushes}")
        index = k % team.claims
        name = claim_name(index)
        plan = edit_claim(team, index)
        expect.arm(
            lambda o, name=name, plan=plan: (
                o["metadata"]["name"] == name and o["spec"].get("plan") == plan
            )
        )
        took, pushed = timed_push(team.tenant.clone)
        seen = expect.wait(f"push {k + 1}: the Control Plane copy with plan {plan}", 120)
        latency.append(seen - pushed)
        push.append(took)
        baseline = team.baseline_dir / f"{name}.yaml"
        baseline.write_text(claim(name, team.baseline_namespace, plan))
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
    return latency, push, apply


def measure_pushes(
    clusters: Clusters,
    team: Team,
    sizes: Sequence[int],
    pushes: int,
    work: Path,
    progress: Progress,
) -> list[Figure]:
    """The push latency at each size (smallest first), the bot commits at the first."""
    figures: list[Figure] = []
    expect = Expect(clusters.control_plane, POSTGRES, team.tenant.mapped, "bench-cp").start()
    try:
        for size in sorted(set(sizes)):
            note = f"{pushes} pushes"
            if (was := team.claims) != size:
                took = resize(clusters, team, size, progress)
                how = "grown" if size > was else "shrunk"
                note += f"; {how} from {was} claims in one push, both clusters in {took:.1f} s"
            before = remote_head(team.tenant.remote)
            latency, push, apply = push_round(clusters, team, expect, pushes, work, progress)
            name = f"push → CP copy ({size}-claim repo)"
            figures += latency_figures(name, latency, "git push", push, note)
            figures += latency_figures(name, latency, "kubectl apply --server-side, 1 file", apply)
            if len(figures) == 4:
                figures.append(bot_commits_per_push(team, before, pushes))
    finally:
        expect.stop()
    return figures


def bot_commits_per_push(team: Team, before: str, pushes: int) -> Figure:
    """Status commits on main per human push (each push changes one claim's plan; no provider
    changes a status), once the last push is noted as reconciled, so its write-back has decided.
    Issue 15: only a change of status or refusals makes a commit."""
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
