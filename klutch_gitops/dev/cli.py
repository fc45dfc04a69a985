"""``klutch-gitops dev``: the embedded local stack, and the whole product running on it."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from klutch_gitops.cli_options import LogLevel, LogLevelOption
from klutch_gitops.console import err, out
from klutch_gitops.dev.localstack import binaries, daemon
from klutch_gitops.dev.localstack.stack import StackInfo

dev = typer.Typer()  # its help is the root app's (klutch_gitops/cli.py loads it lazily)

StateDir = Annotated[
    Path,
    typer.Option(
        "--state-dir",
        help="Where the stack keeps its files [env: KLUTCH_STATE_DIR]",
        default_factory=daemon.default_state_dir,
        show_default="~/.local/state/klutch-gitops/dev",
    ),
]


class Output(StrEnum):
    text = "text"
    json = "json"


@dev.command()
def bins() -> None:
    """Build the stack's Go binaries into the cache (skips what is already there)."""
    started = time.monotonic()
    if out.is_terminal:
        with err.status("checking binaries…") as spinner:
            running: list[str] = []  # what is being built, as "name (component)"

            def on_step(step: binaries.Step) -> None:
                what = f"{step.name} ({step.component})"
                if step.seconds is None:
                    running.append(what)
                else:
                    running.remove(what)
                spinner.update(spinner_text(running))

            reports = binaries.build_missing(on_step)
    else:  # a log (CI's): a line per step, since a cold build takes half an hour
        reports = binaries.build_missing(
            lambda step: out.print(progress_line(step, time.monotonic() - started), markup=False)
        )
    out.print(f"{'binary':<24} {'version':<36} {'source':<18} build")
    for r in reports:
        took = f"{r.seconds:.0f}s" if r.seconds is not None else "-"
        out.print(f"{r.binary:<24} {r.version:<36} {r.source:<18} {took}")
    out.print(f"binaries ready in {binaries.cache_root()} ({time.monotonic() - started:.0f}s)")


def spinner_text(running: list[str]) -> str:
    """What the spinner says while the steps ``running`` run."""
    if not running:
        return "checking binaries…"
    return (
        f"building {', '.join(running)} with go build — a cold build of kube-apiserver takes "
        "several minutes…"
    )


def progress_line(step: binaries.Step, elapsed: float) -> str:
    """One line of the build's log: when since the start, what, and how long it took."""
    what = f"{step.name} ({step.component} {step.version})"
    if step.seconds is None:
        return f"{elapsed:5.0f}s  start {what}"
    return f"{elapsed:5.0f}s  done  {what} in {step.seconds:.0f}s"


@dev.command()
def up(state_dir: StateDir) -> None:
    """Start the stack in the background (or report the one already running)."""
    with err.status("starting the local stack…") as spinner:
        result = daemon.up(state_dir, on_event=lambda line: spinner.update(line))
    if result.already_running:
        out.print(f"[yellow]a local stack is already running[/yellow] in {result.info.state_dir}")
    else:
        out.print(f"[green]local stack up[/green] in {result.info.startup_seconds:.1f}s")
    _print_info(result.info)


@dev.command("run")
def dev_run(state_dir: StateDir, log_level: LogLevelOption = LogLevel.info) -> None:
    """The whole product on the local stack: start it, seed example repositories, reconcile."""
    from bind_api.config import load_bind_api_config
    from bind_api.server import serve_in_background
    from klutch_gitops import logs
    from klutch_gitops.cli import reconcile_until_signal
    from klutch_gitops.dev.demo import TEAM, seed

    with err.status("starting the local stack…") as spinner:
        result = daemon.up(state_dir, on_event=lambda line: spinner.update(line))
        spinner.update("seeding example repositories…")
        demo = seed(result.info)
    _print_info(result.info)
    app_kubeconfig = result.info.clusters["app"].kubeconfig
    cp_kubeconfig = result.info.clusters["control-plane"].kubeconfig
    uri = (
        f"kubectl --kubeconfig {app_kubeconfig} -n {TEAM} get secret orders-binding-creds "
        "-o jsonpath='{.data.uri}' | base64 -d"
    )
    out.print(f"""
bind API              {demo.bind_api_url}  (config {demo.bind_api_config})
  browser bind        kubectl bind {demo.bind_api_url}/export   (Klutch's flow, log in as below)
  CLI bind            klutch-bind exports {demo.bind_api_url}
team-a repository     file://{demo.repositories[TEAM]}
platform repository   file://{demo.repositories["platform"]}
reconciler config     {demo.config}

team-a's orders-db becomes a real PostgreSQL database on the stack (about a minute). Then:
  kubectl --kubeconfig {app_kubeconfig} -n {TEAM} get postgresqlinstances,servicebindings
  psql "$({uri})"

Change it through Git (in another terminal):
  git clone file://{demo.repositories[TEAM]} team-a && cd team-a
  sed -i 's/postgresql-single-nano/postgresql-single-small/' claims/orders-db.yaml
  git commit -qam 'bigger orders database' && git push
  kubectl --kubeconfig {cp_kubeconfig} get postgresqlinstances,localdatabases -A
  git pull && cat claims/.klutch/reconcile.yaml

Ctrl-C stops the reconciler; 'klutch-gitops dev down' stops the stack.""")
    logs.configure(log_level.value)
    serve_in_background(load_bind_api_config(demo.bind_api_config))
    reconcile_until_signal(demo.config)


@dev.command()
def down(state_dir: StateDir) -> None:
    """Stop the stack and every process it started."""
    killed = daemon.down(state_dir)
    note = f" (killed leftovers: {', '.join(killed)})" if killed else ""
    out.print(f"local stack in {state_dir} stopped{note}")


@dev.command()
def status(
    state_dir: StateDir, output: Annotated[Output, typer.Option("-o", "--output")] = Output.text
) -> None:
    """Show the stack and its processes; exit 0 running, 1 degraded, 3 not running."""
    info, components = daemon.status(state_dir)
    running = [c for c in components if c.pid is not None]
    code = 3 if info is None else (0 if len(running) == len(components) else 1)
    if output is Output.json:
        out.print_json(
            json.dumps(
                {
                    "running": info is not None,
                    "info": asdict(info) if info else None,
                    "processes": [asdict(c) for c in components],
                }
            )
        )
        raise typer.Exit(code)
    if info is None:
        out.print(f"no local stack is running in {state_dir}")
        raise typer.Exit(code)
    table = Table("process", "pid", "state")
    for c in components:
        table.add_row(c.name, str(c.pid or "—"), "running" if c.pid else "[red]not running[/red]")
    out.print(table)
    _print_info(info)
    raise typer.Exit(code)


def _print_info(info: StackInfo) -> None:
    """Plain ``label value`` lines: paths and URLs must survive copy-paste, so never wrap them."""
    rows = []
    for name, cluster in info.clusters.items():
        rows += [(f"{name} cluster", cluster.url), ("  kubeconfig", cluster.kubeconfig)]
    rows += [
        ("Dex issuer", info.dex.issuer),
        ("  CA", info.dex.ca),
        ("  user", f"{info.dex.email} (groups: {', '.join(info.dex.groups)})"),
        ("  password", info.dex.password),
        (
            "  clients",
            f"{info.dex.automation_client_id} (confidential), {info.dex.cli_client_id} (public), "
            f"{info.dex.web_client_id} (the bind API's browser flow)",
        ),
        (
            "Crossplane",
            f"{info.crossplane_release} (line {info.crossplane}, KLUTCH_CROSSPLANE_VERSION)",
        ),
        ("environment", f"source {Path(info.state_dir) / 'stack.env'}"),
    ]
    for label, value in rows:
        out.print(f"{label:<22} {value}")
    out.print(f"try: kubectl --kubeconfig {info.clusters['app'].kubeconfig} get namespaces")
