"""The ``klutch-gitops`` command line."""

from __future__ import annotations

import json
import signal
import threading
import time
from dataclasses import asdict
from enum import StrEnum
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.markup import escape
from rich.table import Table

from klutch_gitops import __version__
from klutch_gitops.console import err, out, run_cli
from klutch_gitops.dev.localstack import binaries, daemon
from klutch_gitops.dev.localstack.stack import StackInfo

app = typer.Typer(
    help="GitOps front door for Klutch data services.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
dev = typer.Typer(
    help="The embedded local stack: etcd, two clusters (app, control-plane), Dex.",
    no_args_is_help=True,
)
app.add_typer(dev, name="dev")


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


def main() -> None:
    run_cli(app)


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="The reconciler's config file")],
    once: Annotated[
        bool, typer.Option("--once", help="Sync every repository once and exit")
    ] = False,
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
) -> None:
    """The main job: mirror claims from Git into the clusters and write status back to Git."""
    from klutch_gitops import logs
    from klutch_gitops.config_file import load_config
    from reconciler.manager import Reconciler

    logs.configure(log_level)
    settings = load_config(config)
    if once:
        failures = Reconciler(settings).run_once()
        for failure in failures:
            err.print(f"[red]failed:[/red] {escape(failure)}")
        raise typer.Exit(1 if failures else 0)
    _reconcile_until_signal(config)


def _reconcile_until_signal(config: Path) -> None:
    """Run the reconciler until SIGINT or SIGTERM, then stop it cleanly."""
    from klutch_gitops.config_file import load_config
    from reconciler.manager import Reconciler

    settings = load_config(config)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    reconciler = Reconciler(settings).start()
    err.print(
        f"reconciling {len(settings.repositories)} repositories; "
        f"health, metrics and webhooks on http://{settings.listen}"
    )
    stop.wait()
    reconciler.stop()


@app.command("bind-api")
def bind_api(
    config: Annotated[Path, typer.Option("--config", "-c", help="The bind API's config file")],
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
) -> None:
    """The bind API: OIDC-authenticated bindings of App Clusters and repositories."""
    from bind_api.server import serve
    from klutch_gitops import logs

    logs.configure(log_level)
    serve(config)


@app.command("local-provider")
def local_provider(
    kubeconfig: Annotated[
        Path, typer.Option("--kubeconfig", help="The Control Plane's kubeconfig")
    ],
    context: Annotated[str | None, typer.Option("--context")] = None,
    backup_dir: Annotated[
        Path | None,
        typer.Option("--backup-dir", help="Backup store of ProviderConfigs without their own"),
    ] = None,
    pg_bin_dir: Annotated[
        Path | None,
        typer.Option("--pg-bin-dir", help="Where pg_dump and pg_restore are [default: found]"),
    ] = None,
    poll_interval: Annotated[
        float, typer.Option("--poll-interval", help="Seconds between checks for drift")
    ] = 60.0,
    health_port: Annotated[
        int, typer.Option("--health-port", help="Serve /healthz on 127.0.0.1 (0: off)")
    ] = 0,
    postgres_host: Annotated[
        str | None,
        typer.Option("--postgres-host", help="Write a ProviderConfig for this server at start"),
    ] = None,
    postgres_port: Annotated[int, typer.Option("--postgres-port")] = 5432,
    postgres_user: Annotated[str, typer.Option("--postgres-user")] = "postgres",
    postgres_password_file: Annotated[
        Path | None, typer.Option("--postgres-password-file", help="The superuser's password")
    ] = None,
    provider_config: Annotated[
        str, typer.Option("--provider-config", help="Name of the ProviderConfig to write")
    ] = "default",
    secret_namespace: Annotated[
        str, typer.Option("--secret-namespace", help="Where its credentials Secret goes")
    ] = "crossplane-system",  # noqa: S107 - a namespace, not a password
    log_level: Annotated[str, typer.Option("--log-level")] = "info",
) -> None:
    """LocalDatabase, LocalUser, LocalBackup and LocalRestore on a PostgreSQL server."""
    from klutch_gitops import logs
    from klutch_gitops.dev.local_provider.provider import LocalProvider, bootstrap, serve_health
    from klutch_gitops.dev.localstack.postgres import bin_dir
    from klutch_gitops.errors import KlutchError
    from klutch_gitops.kube.client import Kube, api_client

    if postgres_host and postgres_password_file is None:
        raise KlutchError(
            "--postgres-host needs --postgres-password-file",
            "pass a file holding the password (never the password itself)",
        )
    logs.configure(log_level)
    kube = Kube(api_client(kubeconfig, context))
    provider = LocalProvider(  # installs its CRDs (Established) before anything uses them
        kube, backup_dir=backup_dir, bin_dir=pg_bin_dir or bin_dir(), poll_interval=poll_interval
    ).start()
    if postgres_host and postgres_password_file is not None:
        bootstrap(
            kube,
            provider_config,
            host=postgres_host,
            port=postgres_port,
            username=postgres_user,
            password=postgres_password_file.read_text().strip(),
            namespace=secret_namespace,
        )
    if health_port:
        serve_health(health_port, provider.synced)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    err.print(f"local provider running against {kubeconfig}")
    stop.wait()
    provider.stop()


class PlanOutput(StrEnum):
    markdown = "markdown"
    json = "json"


@app.command()
def plan(
    base: Annotated[str, typer.Option("--base", help="The branch the pull request merges into")],
    head: Annotated[str, typer.Option("--head", help="The pull request's branch or commit")],
    repo: Annotated[Path, typer.Option("--repo", help="A clone holding both commits")] = Path(),
    path: Annotated[
        list[str] | None,
        typer.Option("--path", help="A folder of claims (repeatable; default: ., or the config's)"),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option("--config", "-c", help="The reconciler's config: its registrations of --repo"),
    ] = None,
    repository: Annotated[
        list[str] | None,
        typer.Option("--repository", help="With --config: the registration(s) to plan by name"),
    ] = None,
    control_plane_kubeconfig: Annotated[
        Path | None,
        typer.Option("--control-plane-kubeconfig", help="The binding's Control Plane kubeconfig"),
    ] = None,
    consumer_namespace: Annotated[
        str | None,
        typer.Option("--consumer-namespace", help="The binding's namespace on the Control Plane"),
    ] = None,
    app_kubeconfig: Annotated[
        Path | None,
        typer.Option("--app-kubeconfig", help="The App Cluster, for deletion protection set there"),
    ] = None,
    app_namespace: Annotated[
        list[str] | None,
        typer.Option(
            "--app-namespace", help="A namespace claims may use (repeatable; default: any)"
        ),
    ] = None,
    output: Annotated[PlanOutput, typer.Option("-o", "--output")] = PlanOutput.markdown,
) -> None:
    """What merging --head into --base does to the claims, checked before the merge.

    Exit code 0: clean; 1: the plan has failures (refused documents, deletion-protected claims,
    changes the Control Plane refuses); 2: wrong usage, or Git or a cluster could not be read.
    Without --config or --control-plane-kubeconfig it checks offline against the catalog.
    """
    import urllib3
    from kubernetes.config.config_exception import ConfigException

    from klutch_gitops.config_file import load_config
    from klutch_gitops.errors import KlutchError
    from klutch_gitops.kube.client import Kube, api_client
    from reconciler.review.plan_io import Target, config_targets, run_plan
    from reconciler.review.plan_render import render_json, render_markdown

    if config and (
        control_plane_kubeconfig or consumer_namespace or app_kubeconfig or app_namespace
    ):
        raise typer.BadParameter(
            "--config names the clusters itself: leave out --control-plane-kubeconfig, "
            "--consumer-namespace, --app-kubeconfig and --app-namespace"
        )
    if repository and not config:
        raise typer.BadParameter("--repository chooses among the registrations of --config")
    if bool(control_plane_kubeconfig) != bool(consumer_namespace):
        raise typer.BadParameter("--control-plane-kubeconfig and --consumer-namespace go together")
    try:
        if config:
            targets = config_targets(load_config(config), repo, repository or (), path or ())
        else:
            cp = Kube(api_client(control_plane_kubeconfig)) if control_plane_kubeconfig else None
            app_cluster = Kube(api_client(app_kubeconfig)) if app_kubeconfig else None
            targets = [
                Target(
                    name=folder,
                    path=folder,
                    consumer_namespace=consumer_namespace,
                    app_namespaces=frozenset(app_namespace) if app_namespace else None,
                    control_plane=cp,
                    app=app_cluster,
                )
                for folder in path or ["."]
            ]
        result = run_plan(repo, base, head, targets)
    except KlutchError as error:
        _usage_failure(error.message, error.fix)
    except (OSError, ConfigException, urllib3.exceptions.HTTPError) as error:
        _usage_failure(f"{type(error).__name__}: {error}", "check the files and the clusters")
    out.file.write(render_json(result) if output is PlanOutput.json else render_markdown(result))
    raise typer.Exit(result.exit_code)


def _usage_failure(message: str, fix: str) -> NoReturn:
    """A plan that could not be made: exit 2, as kubectl does for what it cannot read."""
    err.print(f"[red]error:[/red] {escape(message)}")
    if fix:
        err.print(f"[yellow]fix:[/yellow] {escape(fix)}")
    raise typer.Exit(2)


@app.command()
def version() -> None:
    """Print the version."""
    out.print(__version__)


@dev.command()
def bins() -> None:
    """Build the stack's Go binaries into the cache (skips what is already there)."""
    started = time.monotonic()
    with err.status("checking binaries…") as spinner:

        def on_start(component: str, binary: str) -> None:
            spinner.update(
                f"building {binary} ({component}) with go build — a cold build of "
                "kube-apiserver takes several minutes…"
            )

        reports = binaries.build_missing(on_start)
    out.print(f"{'binary':<24} {'version':<36} {'source':<18} build")
    for r in reports:
        took = f"{r.seconds:.0f}s" if r.seconds is not None else "-"
        out.print(f"{r.binary:<24} {r.version:<36} {r.source:<18} {took}")
    out.print(f"binaries ready in {binaries.cache_root()} ({time.monotonic() - started:.0f}s)")


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
def dev_run(
    state_dir: StateDir, log_level: Annotated[str, typer.Option("--log-level")] = "info"
) -> None:
    """The whole product on the local stack: start it, seed example repositories, reconcile."""
    from bind_api.config import load_bind_api_config
    from bind_api.server import serve_in_background
    from klutch_gitops import logs
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
    logs.configure(log_level)
    serve_in_background(load_bind_api_config(demo.bind_api_config))
    _reconcile_until_signal(demo.config)


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
        ("environment", f"source {Path(info.state_dir) / 'stack.env'}"),
    ]
    for label, value in rows:
        out.print(f"{label:<22} {value}")
    out.print(f"try: kubectl --kubeconfig {info.clusters['app'].kubeconfig} get namespaces")


if __name__ == "__main__":
    main()
