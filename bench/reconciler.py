"""Reconciler benchmarks on a dedicated local stack, each beside a baseline from the same run.

1. cold full sync of N claims into App + Control Plane, vs ``kubectl apply --server-side`` of the
   same files into one cluster;
2. ``git push`` → Control Plane copy, vs the push itself and a one-file ``kubectl apply``;
3. Control Plane status → App status and → status commit on main, vs one status write;
4. many repositories on 1 and on 3 reconciler processes (``bench/fleet.py``): full sync, steady
   CPU, peak RSS per replica, hand-over after a SIGKILL; 1 replica against kubectl, both
   kube-apiservers, an idle Python process and the lease duration, 3 against 1.

Run with ``make bench`` (or ``python -m bench.reconciler --quick``). Nothing here asserts a time;
the exit code is 1 only when a measurement could not complete.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from bench.fleet import measure_fleets
from bench.harness import (
    HUMAN,
    PLANS,
    POSTGRES,
    BenchFailure,
    Clusters,
    Expect,
    Progress,
    Tenant,
    claim_file,
    claim_name,
    claim_text,
    converge,
    count,
    git,
    make_tenant,
    remote_file,
    remote_head,
    running_stack,
    seeded_remote,
    timed_push,
    wait_until,
    write_claims,
)
from bench.report import Figure, load_previous, percentile, render, save
from klutch_gitops.config import Config, RepositorySpec, SecretRef
from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import NAMESPACES, Kube
from reconciler.manager import Reconciler

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
STEPS = ("cold", "push", "status", "fleet")
DEFAULTS = Config(control_plane_kubeconfig=Path())  # the product's defaults, reported as used
console = Console(stderr=True)


@dataclass(frozen=True)
class Sizes:
    claims: int
    pushes: int
    status_changes: int
    repos: int
    claims_per_repo: int
    replicas: tuple[int, ...]


@dataclass
class Team:
    """The one repository of measurements 1 to 3: its tenant, remote, a person's clone, and the
    kubectl baseline's namespace and files."""

    tenant: Tenant
    remote: Path
    clone: Path
    baseline_namespace: str
    baseline_dir: Path
    claims: int
    reconciler: Reconciler | None = None


# -- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.reconciler", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes in all")
    parser.add_argument("--claims", type=int, help="claims in the cold-sync repository (1000)")
    parser.add_argument("--pushes", type=int, help="pushes for the push latency (50)")
    parser.add_argument("--status-changes", type=int, help="status changes (20)")
    parser.add_argument("--repos", type=int, help="repositories for the RSS run (100)")
    parser.add_argument("--claims-per-repo", type=int, help="claims per repository (100)")
    parser.add_argument(
        "--replicas", help="replica counts for the fleet run, the first is the baseline (1,3)"
    )
    parser.add_argument(
        "--only", action="append", choices=STEPS, help="run only these (repeatable)"
    )
    parser.add_argument("--output", type=Path, default=RESULTS, help="JSON results file")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    return parser.parse_args(argv)


def sizes_of(args: argparse.Namespace) -> Sizes:
    small = args.quick
    return Sizes(
        claims=args.claims or (200 if small else 1000),
        pushes=args.pushes or (10 if small else 50),
        status_changes=args.status_changes or (5 if small else 20),
        repos=args.repos or (10 if small else 100),
        claims_per_repo=args.claims_per_repo or (20 if small else 100),
        replicas=tuple(int(n) for n in (args.replicas or "1,3").split(",")),
    )


# -- helpers ---------------------------------------------------------------------------------


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
    suffix = uuid.uuid4().hex[:6]
    tenant = make_tenant(clusters, f"cluster-{suffix}", f"team-{suffix}", work)
    remote, clone = work / "team.git", work / "human"
    seeded_remote(remote, clone, tenant.namespace, claims)
    baseline_namespace, baseline_dir = f"kubectl-{suffix}", work / "kubectl"
    write_claims(baseline_dir, baseline_namespace, claims)
    return Team(tenant, remote, clone, baseline_namespace, baseline_dir / "claims", claims)


def team_config(clusters: Clusters, team: Team, work: Path) -> Config:
    spec = RepositorySpec(
        name=f"team-{team.tenant.namespace}",
        url=f"file://{team.remote}",
        consumer_namespace=team.tenant.consumer,
        app_namespaces=(team.tenant.namespace,),
        path="claims",
        app_kubeconfig=SecretRef(file=clusters.kubeconfig("app")),
        control_plane_kubeconfig=SecretRef(file=team.tenant.binder),
    )
    return Config(
        control_plane_kubeconfig=clusters.kubeconfig("control-plane"),
        repositories=(spec,),
        listen=f"127.0.0.1:{free_port()}",
        work_dir=work / "reconciler",
    )


def measure_cold_sync(
    clusters: Clusters, team: Team, work: Path, progress: Progress
) -> list[Figure]:
    n, tenant = team.claims, team.tenant
    config = team_config(clusters, team, work)
    started = time.monotonic()
    team.reconciler = Reconciler(config).start()
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
    git(team.clone, "pull", "-q", "--rebase", "origin", "main")
    name = claim_name(index)
    path = team.clone / claim_file(index)
    text = path.read_text()
    path.write_text(text.replace(next(p for p in PLANS if f"plan: {p}\n" in text), plan, 1))
    git(team.clone, *HUMAN, "commit", "-qam", f"{name}: plan {plan}")


def measure_pushes(
    clusters: Clusters, team: Team, pushes: int, work: Path, progress: Progress
) -> list[Figure]:
    expect = Expect(clusters.control_plane, POSTGRES, team.tenant.mapped, "bench-cp").start()
    latency, push, apply = [], [], []
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
            took, pushed = timed_push(team.clone)
            seen = expect.wait(f"push {k + 1}: the Control Plane copy with plan {plan}", 120)
            latency.append(seen - pushed)
            push.append(took)
            baseline = team.baseline_dir / f"{claim_name(index)}.yaml"
            baseline.write_text(claim_text(claim_name(index), team.baseline_namespace, plan))
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
    ]


# -- 3. Control Plane status → App and Git ---------------------------------------------------


def status_body(name: str, namespace: str, host: str) -> dict:
    return {
        "apiVersion": POSTGRES.api_version,
        "kind": POSTGRES.kind,
        "metadata": {"name": name, "namespace": namespace},
        "status": {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Available",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
            "host": host,
        },
    }


def write_status(kube: Kube, name: str, namespace: str, host: str) -> float:
    """A provider's status write (status subresource, its own field manager); when it returned."""
    kube.apply(
        POSTGRES,
        status_body(name, namespace, host),
        field_manager="provider",
        force=True,
        subresource="status",
    )
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
            written = write_status(clusters.control_plane, name, team.tenant.mapped, host)
            seen = expect.wait(f"status change {k + 1} in the App Cluster", 120)
            pushed = wait_until(
                committed(team.remote, claim_file(index), host),
                f"status change {k + 1} in a commit on main",
                timeout=120,
                interval=0.02,
            )
            to_app.append(seen - written)
            to_git.append(pushed - written)
            started = time.monotonic()
            direct.append(write_status(clusters.app, name, team.baseline_namespace, host) - started)
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


# -- the run ---------------------------------------------------------------------------------


def run_steps(
    clusters: Clusters, work: Path, sizes: Sizes, steps: set[str], failures: list[str]
) -> list[Figure]:
    """Every chosen measurement; a failed one is recorded and skips those that need it."""
    figures: list[Figure] = []
    team: Team | None = None
    kubectl_per_claim: float | None = None

    def attempt(step: str, run: Callable[[Progress], list[Figure]]) -> bool:
        with console.status(step) as status:
            try:
                got = run(lambda text: status.update(f"{step}: {text}"))
            except Exception as error:  # a measurement failing must not hide the others
                if not isinstance(error, BenchFailure):
                    logging.getLogger("bench").exception("%s failed", step)
                failures.append(f"{step}: {error}")
                console.print(f"[red]{step} did not complete:[/red] {error}")
                return False
        figures.extend(got)
        for name, figure in {f.name: f for f in got}.items():
            console.print(f"[green]✓[/green] {name}: {figure.value:.3f} {figure.unit}")
        return True

    try:
        if steps & {"cold", "push", "status"}:
            team = prepare_team(clusters, work, sizes.claims)
            if attempt("cold sync", lambda p: measure_cold_sync(clusters, team, work, p)):
                kubectl_per_claim = (figures[-1].baseline_value or 0) / sizes.claims
                if "push" in steps:
                    attempt(
                        "push latency",
                        lambda p: measure_pushes(clusters, team, sizes.pushes, work, p),
                    )
                if "status" in steps:
                    attempt(
                        "status latency",
                        lambda p: measure_status(clusters, team, sizes.status_changes, p),
                    )
            else:
                failures += [f"{s}: not run, the cold sync did not complete" for s in STEPS[1:3]]
        if team is not None and team.reconciler is not None:
            team.reconciler.stop()  # the RSS run gets the machine to itself
            team.reconciler = None
        if "fleet" in steps:
            attempt(
                "fleet",
                lambda p: measure_fleets(
                    clusters,
                    work,
                    sizes.repos,
                    sizes.claims_per_repo,
                    list(sizes.replicas),
                    kubectl_per_claim,
                    p,
                ),
            )
    finally:
        if team is not None and team.reconciler is not None:
            team.reconciler.stop()
    return figures


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sizes_of(args)
    steps = set(args.only or STEPS)
    work = Path(tempfile.mkdtemp(prefix="klutch-bench-"))
    logging.basicConfig(
        filename=work / "bench.log",
        level=logging.INFO,
        format="%(asctime)s %(threadName)s %(name)s %(levelname)s %(message)s",
    )
    console.print(f"work directory {work}; sizes {asdict(sizes)}")
    failures: list[str] = []
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    console.print("starting the local stack")
    try:
        with running_stack(work / "stack") as clusters:
            figures = run_steps(clusters, work, sizes, steps, failures)
            console.print("stopping the local stack")
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/yellow]; work directory kept: {work}")
        return 130
    except KlutchError as error:
        console.print(f"[red]the local stack did not start:[/red] {error} ({error.fix})")
        return 1
    same_sizes = args.output.with_name(
        "last-{claims}c-{pushes}p-{status_changes}s-{repos}x{claims_per_repo}-{r}.json".format(
            **asdict(sizes), r="-".join(map(str, sizes.replicas))
        )
    )
    previous = load_previous(same_sizes, asdict(sizes))
    table_console = Console(width=None if sys.stdout.isatty() else 150)
    render(figures, previous, f"klutch-gitops reconciler benchmark ({when})", table_console)
    meta = {
        "when": when,
        "command": " ".join(["python -m bench.reconciler", *(argv or sys.argv[1:])]),
        "sizes": asdict(sizes),
        "cpus": os.cpu_count(),
        "reconciler": {
            "batch_window": DEFAULTS.batch_window,
            "poll_interval": DEFAULTS.poll_interval,
            "workers": DEFAULTS.workers,
        },
        "failures": failures,
    }
    for path in (args.output, same_sizes):
        save(path, figures, meta)
    console.print(f"results written to {args.output} and {same_sizes.name}")
    if failures:
        console.print("[red]measurements that did not complete:[/red]")
        for failure in failures:
            console.print(f"  {failure}")
        console.print(f"logs kept in {work}")
        return 1
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
