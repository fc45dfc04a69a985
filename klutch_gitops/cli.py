"""The ``klutch-gitops`` command line."""

from __future__ import annotations

import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.markup import escape

from klutch_gitops.cli_errors import explain
from klutch_gitops.cli_options import (
    HELP_WIDTH,
    ClusterOption,
    KubeconfigOption,
    LogLevel,
    LogLevelOption,
    VersionOption,
    add_conventions,
)
from klutch_gitops.console import err, out, run_cli
from klutch_gitops.inspect import commands as inspect_commands
from klutch_gitops.lazy_group import lazy_typer
from klutch_gitops.server_extra import require_server

if TYPE_CHECKING:
    from klutch_gitops.config import Config


class ExplainingTyper(typer.Typer):
    """Every command's known library errors (an unreachable cluster, an unreadable file) become
    a KlutchError, which ``run_cli`` prints as one error and its fix, exit code 1."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as error:
            explained = explain(error)
            if explained is None:
                raise
            raise explained from None


app = ExplainingTyper(
    help="GitOps front door for Klutch data services.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: option names are never cut at 80 columns
    add_completion=False,  # 'klutch-gitops completion bash|zsh|fish' instead, as kubectl has
    context_settings={"max_content_width": HELP_WIDTH},
)
# Loaded when a dev command runs: the local stack is no part of the other commands or of a Pod.
app.add_typer(
    lazy_typer(
        "klutch_gitops.dev.cli:dev",
        "The embedded local stack: etcd, two clusters (app, control-plane), Dex.",
    ),
    name="dev",
)


def main() -> None:
    run_cli(app)


@app.callback()
def root(version: VersionOption = False) -> None:
    """GitOps front door for Klutch data services."""


@app.command()
def run(
    config: Annotated[Path, typer.Option("--config", "-c", help="The reconciler's config file")],
    once: Annotated[
        bool, typer.Option("--once", help="Sync every repository once and exit")
    ] = False,
    log_level: LogLevelOption = LogLevel.info,
) -> None:
    """The main job: mirror claims from Git into the clusters and write status back to Git."""
    require_server("run")
    from klutch_gitops import logs
    from reconciler.manager import Reconciler

    logs.configure(log_level.value)
    if once:
        settings = reconciler_config(config)
        failures = Reconciler(settings).run_once()
        for failure in failures:
            err.print(f"[red]failed:[/red] {escape(failure)}")
        raise typer.Exit(1 if failures else 0)
    reconcile_until_signal(config)


def reconcile_until_signal(config: Path) -> None:
    """Run the reconciler until SIGINT or SIGTERM, then stop it cleanly."""
    from klutch_gitops import preflight
    from reconciler.manager import Reconciler

    settings = reconciler_config(config)
    preflight.listen_address(settings.listen, f"{config}: listen")
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


def reconciler_config(path: Path) -> Config:
    """The reconciler's config, once its Control Plane answers (else an error naming the field)."""
    from klutch_gitops import preflight
    from klutch_gitops.config_file import load_config

    settings = load_config(path)
    preflight.reach_cluster(settings.control_plane_kubeconfig, f"{path}: controlPlane.kubeconfig")
    return settings


@app.command("bind-api")
def bind_api(
    config: Annotated[Path, typer.Option("--config", "-c", help="The bind API's config file")],
    log_level: LogLevelOption = LogLevel.info,
) -> None:
    """The bind API: OIDC-authenticated bindings of App Clusters and repositories."""
    require_server("bind-api")
    from bind_api.config import load_bind_api_config
    from bind_api.server import serve
    from klutch_gitops import logs, preflight

    settings = load_bind_api_config(config)
    preflight.ca_file(settings.issuer_ca, f"{config}: oidc.ca")
    preflight.certificate_pair(settings.tls_cert, settings.tls_key, f"{config}: tls")
    preflight.listen_address(settings.listen, f"{config}: listen")
    preflight.reach_cluster(settings.control_plane_kubeconfig, f"{config}: controlPlane.kubeconfig")
    logs.configure(log_level.value)
    serve(config)


@app.command("local-provider")
def local_provider(
    kubeconfig: KubeconfigOption = None,
    context: Annotated[
        str | None,
        typer.Option("--context", help="The Control Plane's context (default: the current one)"),
    ] = None,
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
        str,
        typer.Option(
            "--provider-config",
            help="Name of the ProviderConfig and of the ClusterProviderConfig (for Crossplane 2's "
            "namespaced resources) to write",
        ),
    ] = "default",
    secret_namespace: Annotated[
        str, typer.Option("--secret-namespace", help="Where its credentials Secret goes")
    ] = "crossplane-system",  # noqa: S107 - a namespace, not a password
    log_level: LogLevelOption = LogLevel.info,
) -> None:
    """LocalDatabase, LocalUser, LocalBackup and LocalRestore on a PostgreSQL server, cluster-scoped
    and namespaced (Crossplane 2)."""
    require_server("local-provider")
    from klutch_gitops import logs, preflight
    from klutch_gitops.config import SecretRef
    from klutch_gitops.dev.localstack.postgres import bin_dir
    from klutch_gitops.errors import KlutchError
    from klutch_gitops.settings import secret_value
    from klutch_local.provider.provider import LocalProvider, bootstrap, serve_health

    if postgres_host and postgres_password_file is None:
        raise KlutchError(
            "--postgres-host needs --postgres-password-file",
            "pass a file holding the password (never the password itself)",
        )
    password = (
        secret_value(
            SecretRef(file=postgres_password_file),
            "--postgres-password-file",
            program="klutch-gitops local-provider",
        )
        .decode()
        .strip()
        if postgres_host and postgres_password_file
        else ""
    )
    preflight.programs(pg_bin_dir, "--pg-bin-dir", ("pg_dump", "pg_restore"))
    preflight.directory(backup_dir, "--backup-dir")
    kube = ClusterOption(kubeconfig, context, "--kubeconfig").connect(None)
    logs.configure(log_level.value)
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
            password=password,
            namespace=secret_namespace,
        )
    if health_port:
        serve_health(health_port, provider.synced)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    err.print(f"local provider running against {kube.api.configuration.host}")
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
    context: Annotated[
        str | None,
        typer.Option(
            "--context",
            help="The Control Plane's context in --kubeconfig ($KUBECONFIG, ~/.kube/config)",
        ),
    ] = None,
    consumer_namespace: Annotated[
        str | None,
        typer.Option("--consumer-namespace", help="The binding's namespace on the Control Plane"),
    ] = None,
    app_kubeconfig: Annotated[
        Path | None,
        typer.Option("--app-kubeconfig", help="The App Cluster, for deletion protection set there"),
    ] = None,
    app_context: Annotated[
        str | None,
        typer.Option("--app-context", help="The App Cluster's context in --kubeconfig"),
    ] = None,
    kubeconfig: KubeconfigOption = None,
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
    Without --config, --control-plane-kubeconfig or --context it checks offline against the
    catalog.
    """
    require_server("plan")
    from klutch_gitops.errors import KlutchError
    from reconciler.review.plan_io import Target, config_targets, run_plan
    from reconciler.review.plan_render import render_json, render_markdown

    control_plane = ClusterOption(control_plane_kubeconfig, context, "--control-plane-kubeconfig")
    app_cluster = ClusterOption(app_kubeconfig, app_context, "--app-kubeconfig")
    _check_plan_options(
        config, repository, control_plane, consumer_namespace, app_cluster, app_namespace
    )
    try:
        if config:
            targets = config_targets(reconciler_config(config), repo, repository or (), path or ())
        else:
            cp = control_plane.kube(kubeconfig)
            app = app_cluster.kube(kubeconfig)
            targets = [
                Target(
                    name=folder,
                    path=folder,
                    consumer_namespace=consumer_namespace,
                    app_namespaces=frozenset(app_namespace) if app_namespace else None,
                    control_plane=cp,
                    app=app,
                )
                for folder in path or ["."]
            ]
        result = run_plan(repo, base, head, targets)
    except KlutchError as error:
        _usage_failure(error.message, error.fix)
    except Exception as error:
        explained = explain(error)
        if explained is None:
            raise
        _usage_failure(explained.message, explained.fix)
    out.file.write(render_json(result) if output is PlanOutput.json else render_markdown(result))
    raise typer.Exit(result.exit_code)


def _check_plan_options(
    config: Path | None,
    repository: list[str] | None,
    control_plane: ClusterOption,
    consumer_namespace: str | None,
    app_cluster: ClusterOption,
    app_namespace: list[str] | None,
) -> None:
    """Refuse combinations of options that contradict each other, before anything is read."""
    if config and (control_plane or consumer_namespace or app_cluster or app_namespace):
        raise typer.BadParameter(
            "--config names the clusters itself: leave out --control-plane-kubeconfig, "
            "--context, --consumer-namespace, --app-kubeconfig, --app-context and --app-namespace"
        )
    if repository and not config:
        raise typer.BadParameter("--repository chooses among the registrations of --config")
    if bool(control_plane) != bool(consumer_namespace):
        raise typer.BadParameter(
            "--control-plane-kubeconfig (or --context) and --consumer-namespace go together"
        )


def _usage_failure(message: str, fix: str) -> NoReturn:
    """A plan that could not be made: exit 2, as kubectl does for what it cannot read."""
    err.print(f"[red]error:[/red] {escape(message)}")
    if fix:
        err.print(f"[yellow]fix:[/yellow] {escape(fix)}")
    raise typer.Exit(2)


add_conventions(app)  # version, completion
inspect_commands.register(app)  # get, reconcile, suspend, resume: after the main job's commands

if __name__ == "__main__":
    main()
