"""Reconciler benchmarks on a dedicated local stack, each beside a baseline from the same run.

1. cold full sync of N claims into App + Control Plane, vs ``kubectl apply --server-side`` of the
   same files into one cluster, a concurrent server-side-apply writer into both clusters, and the
   real Flux kustomize-controller applying the same files into the App Cluster;
2. ``git push`` → Control Plane copy at several repository sizes, vs the push itself and a
   one-file ``kubectl apply``;
3. Control Plane status → App status and → status commit on main, vs one status write;
4. many repositories on 1 and on 3 reconciler processes (``bench/fleet.py``): full sync, steady
   CPU, peak RSS per replica, hand-over after a SIGKILL; 1 replica against kubectl, both
   kube-apiservers, an idle Python process and the lease duration, 3 against 1.

1 and 3 are measured in ``bench/team.py`` (Flux: ``bench/flux.py``), 2 in ``bench/pushes.py``,
4 in ``bench/fleet.py`` (its replica processes: ``bench/replica.py``); this module runs them and
reports. Run with ``make bench`` (or
``python -m bench.reconciler --quick``). Nothing here asserts a time; the exit code is 1 only
when a measurement could not complete.
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console

from bench.fleet import measure_fleets
from bench.flux import measure_flux_peer
from bench.measure import BenchFailure, Progress
from bench.pushes import measure_pushes
from bench.report import Figure, load_previous, render, save
from bench.ssa import INFLIGHT
from bench.stack import Clusters, running_stack
from bench.team import (
    DEFAULTS,
    KUBECTL_COLD,
    Team,
    measure_cold_sync,
    measure_status,
    prepare_team,
)
from klutch_gitops.errors import KlutchError
from tests.kit.wait import TimedOut

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
STEPS = ("cold", "push", "status", "fleet")
console = Console(stderr=True)


@dataclass(frozen=True)
class Sizes:
    claims: int
    pushes: int
    push_sizes: tuple[int, ...]
    ssa_inflight: int
    status_changes: int
    repos: int
    claims_per_repo: int
    replicas: tuple[int, ...]


# -- command line ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.reconciler", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes in all")
    parser.add_argument("--claims", type=int, help="claims in the cold-sync repository (1000)")
    parser.add_argument("--pushes", type=int, help="pushes for the push latency (50)")
    parser.add_argument(
        "--push-sizes", help="repository sizes of the push latency, in one run (200,1000,5000)"
    )
    parser.add_argument(
        "--ssa-inflight", type=int, help=f"requests in flight of the concurrent writer ({INFLIGHT})"
    )
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
        push_sizes=tuple(
            int(n) for n in (args.push_sizes or ("50,200" if small else "200,1000,5000")).split(",")
        ),
        ssa_inflight=args.ssa_inflight or INFLIGHT,
        status_changes=args.status_changes or (5 if small else 20),
        repos=args.repos or (10 if small else 100),
        claims_per_repo=args.claims_per_repo or (20 if small else 100),
        replicas=tuple(int(n) for n in (args.replicas or "1,3").split(",")),
    )


# -- the run ---------------------------------------------------------------------------------


Attempt = Callable[[str, Callable[[Progress], list[Figure]]], list[Figure] | None]


def team_steps(
    clusters: Clusters, team: Team, work: Path, sizes: Sizes, steps: set[str], attempt: Attempt
) -> float | None:
    """1 to 3 on the team's repository (status before the pushes, which resize it); (1)'s
    kubectl seconds per claim, for the fleet's baseline, or None when the cold sync failed."""
    n = sizes.claims
    got = attempt(
        "cold sync", lambda p: measure_cold_sync(clusters, team, work, sizes.ssa_inflight, p)
    )
    if got is None:
        return None
    cold = next(f for f in got if f.baseline == KUBECTL_COLD.format(n=n))
    if "cold" in steps:  # the peer only: our cold sync runs for the others too
        attempt("Flux", lambda p: measure_flux_peer(clusters, work, cold, n, p))
    if "status" in steps:
        attempt("status latency", lambda p: measure_status(clusters, team, sizes.status_changes, p))
    if "push" in steps:
        attempt(
            "push latency",
            lambda p: measure_pushes(clusters, team, sizes.push_sizes, sizes.pushes, work, p),
        )
    return (cold.baseline_value or 0) / n


def run_steps(
    clusters: Clusters, work: Path, sizes: Sizes, steps: set[str], failures: list[str]
) -> list[Figure]:
    """Every chosen measurement; a failed one is recorded and skips those that need it."""
    figures: list[Figure] = []
    team: Team | None = None
    kubectl_per_claim: float | None = None

    def attempt(step: str, run: Callable[[Progress], list[Figure]]) -> list[Figure] | None:
        with console.status(step) as status:
            try:
                got = run(lambda text: status.update(f"{step}: {text}"))
            except Exception as error:  # a measurement failing must not hide the others
                if not isinstance(error, BenchFailure | TimedOut):
                    logging.getLogger("bench").exception("%s failed", step)
                failures.append(f"{step}: {error}")
                console.print(f"[red]{step} did not complete:[/red] {error}")
                return None
        figures.extend(got)
        for figure in got:
            against = f" (baseline {figure.baseline_value:.3f})" if figure.baseline_value else ""
            console.print(
                f"[green]✓[/green] {figure.name}: {figure.value:.3f} {figure.unit}{against}"
            )
        return got

    try:
        if steps & {"cold", "push", "status"}:
            team = prepare_team(clusters, work, sizes.claims)
            kubectl_per_claim = team_steps(clusters, team, work, sizes, steps, attempt)
            if kubectl_per_claim is None:
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
        "last-{claims}c-{pushes}p-{ps}-{status_changes}s-{repos}x{claims_per_repo}-{r}.json".format(
            **asdict(sizes),
            ps="-".join(map(str, sizes.push_sizes)),
            r="-".join(map(str, sizes.replicas)),
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
