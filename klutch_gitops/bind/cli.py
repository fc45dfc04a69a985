"""The ``klutch-bind`` command line (also usable as the kubectl plugin ``kubectl-klutch_bind``).

``login`` (``bind/login_commands.py``) obtains OIDC tokens for the bind API and remembers the
bind API, issuer and client for the kubectl context; ``exports``, ``bind``, ``status`` and
``unbind`` call the bind API with the cached token (or one from ``--token-file`` or
``$KLUTCH_BIND_TOKEN``, never from argv) and keep the App Cluster's side of a binding
(``klutch-bind`` Namespace, kubeconfig Secret, APIServiceBindings) in step, or write it as YAML
for Git with ``--gitops-out`` (never the Secret). ``unbind`` (``bind/unbind.py``) lists what goes
and needs a confirmation first.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from klutch_gitops.bind import app_cluster, login_commands, request
from klutch_gitops.bind import client as bind_client
from klutch_gitops.bind.login_commands import headless, login, logout, token
from klutch_gitops.bind.options import (
    Ca,
    ClientId,
    Context,
    Issuer,
    NoSecretsOnArgv,
    OutputOption,
    TokenFile,
    Url,
    app_kube,
    bearer_token,
    open_client,
)
from klutch_gitops.bind.output import Output, emit, print_bind_report, print_table, show_claims
from klutch_gitops.bind.relabel import relabel
from klutch_gitops.bind.request import GIT_PASSWORD_ENV, claims_for, confirmation_needed
from klutch_gitops.bind.unbind import unbind_command
from klutch_gitops.cli_options import (
    KubeconfigOption,
    VersionOption,
    add_conventions,
    kubeconfig_paths,
)
from klutch_gitops.console import out, run_cli
from klutch_gitops.errors import KlutchError
from klutch_gitops.inspect.show import REPOSITORIES, render
from klutch_gitops.inspect.table import Output as Columns
from klutch_gitops.kube.client import Kube

app = typer.Typer(
    help="Bind an App Cluster and a Git repository to Klutch data-service APIs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=NoSecretsOnArgv,  # an old --token VALUE: a usage error saying what to use instead
    add_completion=False,  # 'klutch-bind completion bash|zsh|fish' instead, as kubectl has
    # click's plain usage errors: the message is the last line on stderr, not a box (exit 2)
    rich_markup_mode=None,
)


def main() -> None:
    run_cli(app)


@app.callback()
def root(version: VersionOption = False) -> None:
    """Bind an App Cluster and a Git repository to Klutch data-service APIs."""


# --- bindings ------------------------------------------------------------------------------------


@app.command()
def exports(
    url: Url = None,
    issuer: Issuer = None,
    token_file: TokenFile = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
) -> None:
    """List the APIs the bind API offers, and whether you may bind them."""
    with open_client(url, issuer, token_file, client_id, ca, kubeconfig, context) as api:
        items = api.exports()
    if emit({"exports": items}, output):
        return
    rows = [
        [
            item["api"],
            "yes" if item.get("allowed") else "no",
            str(len(item.get("permissionClaims") or [])),
            str(item.get("reason", "")),
        ]
        for item in items
    ]
    print_table(["API", "ALLOWED", "CLAIMS", "REASON"], rows)


@app.command("bind")
def bind_command(
    api_names: Annotated[
        list[str], typer.Option("--api", help="An API to bind, <plural>.<group>; repeatable.")
    ],
    url: Url = None,
    cluster_id: Annotated[
        str | None,
        typer.Option("--cluster-id", help="App Cluster identity (default: kube-system's UID)."),
    ] = None,
    repo: Annotated[
        str | None, typer.Option("--repo", help="Also bind this Git repository of claims.")
    ] = None,
    branch: Annotated[
        str, typer.Option("--branch", help="Branch the reconciler follows.")
    ] = "main",
    path: Annotated[str, typer.Option("--path", help="Claims directory in the repo.")] = ".",
    namespaces: Annotated[
        list[str] | None,
        typer.Option("--namespace", help="App namespace the repository manages; repeatable."),
    ] = None,
    git_username: Annotated[
        str | None, typer.Option("--git-username", help="User for an https repository.")
    ] = None,
    git_password_file: Annotated[
        Path | None,
        typer.Option(
            "--git-password-file",
            help="File holding the Git password or token ('-' reads stdin); or set "
            f"${GIT_PASSWORD_ENV}. Never on the command line.",
        ),
    ] = None,
    ssh_key: Annotated[
        Path | None, typer.Option("--ssh-private-key", help="SSH key file for an ssh repository.")
    ] = None,
    known_hosts: Annotated[
        Path | None, typer.Option("--known-hosts", help="known_hosts file for the SSH host.")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Accept the permission claims.")] = False,
    gitops_out: Annotated[
        Path | None,
        typer.Option(
            "--gitops-out", help="Write the App objects as YAML here instead (no Secret)."
        ),
    ] = None,
    issuer: Issuer = None,
    token_file: TokenFile = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
) -> None:
    """Bind APIs (and optionally a repository) for an App Cluster, after confirming the claims."""
    credentials = request.git_credentials(git_username, git_password_file, ssh_key, known_hosts)
    repository = request.repository_body(repo, branch, path, namespaces, credentials)
    app_kubeconfig = (
        request.app_kubeconfig(kubeconfig or _one_kubeconfig(), context)
        if repository is not None
        else None
    )
    direct = gitops_out is None or kubeconfig is not None or context is not None
    kube = app_kube(kubeconfig, context) if direct else None
    if gitops_out is not None:
        app_cluster.gitops_dir(gitops_out)
    with open_client(url, issuer, token_file, client_id, ca, kubeconfig, context) as api:
        claims_by_api = claims_for(api.exports(), api_names)
        show_claims(claims_by_api)
        if confirmation_needed(yes, sys.stdin.isatty()) and not typer.confirm(
            "Accept these permission claims and bind?", err=True
        ):
            raise typer.Exit(1)
        body: dict[str, Any] = {
            "clusterId": cluster_id or app_cluster.identity(kube),
            "apis": api_names,
        }
        if repository is not None:
            body["repository"] = repository
            body["appKubeconfig"] = app_kubeconfig
        result = api.bind(body)
    _complete_on_app_cluster(result, claims_by_api, kube, gitops_out, output)


def _one_kubeconfig() -> Path | None:
    """The kubeconfig file kubectl would read when it is one file ($KUBECONFIG or the default):
    the App kubeconfig sent for a repository is cut from one file; several need --kubeconfig."""
    found = [path for path in kubeconfig_paths(None) if path.is_file()]
    return found[0] if len(found) == 1 else None


def _complete_on_app_cluster(
    result: dict[str, Any],
    claims_by_api: dict[str, list[dict[str, Any]]],
    kube: Kube | None,
    gitops_out: Path | None,
    output: Output,
) -> None:
    """The binding's App Cluster objects, applied (or written for Git), then the report; an
    export the bind API could not bind fails the command after the report."""
    consumer = result["consumerNamespace"]
    bound = {a: claims_by_api[a] for a in result.get("exports") or [] if a in claims_by_api}
    objects = bind_client.app_objects(consumer, result["kubeconfig"], bound)
    report: dict[str, Any] = {k: v for k, v in result.items() if k != "kubeconfig"}
    if gitops_out is not None:
        files = bind_client.gitops_files(consumer, bound)
        report["written"] = app_cluster.write_gitops(gitops_out, files)
        objects = objects[:2]  # the Namespace and the Secret go to the cluster, never to Git
    if kube:
        relabel(kube)  # earlier binds' objects: their consumer label, under today's key
    report["applied"] = app_cluster.apply_app_objects(kube, objects) if kube else []
    print_bind_report(report, output)
    failed = {a: p for a, p in (result.get("phases") or {}).items() if a not in bound}
    if failed:
        raise KlutchError(
            f"not bound: {', '.join(f'{a} ({p})' for a, p in failed.items())}",
            "check the export requests in the consumer namespace on the Control Plane",
        )


@app.command("status")
def status_command(
    url: Url = None,
    issuer: Issuer = None,
    token_file: TokenFile = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
) -> None:
    """List your bindings."""
    with open_client(url, issuer, token_file, client_id, ca, kubeconfig, context) as api:
        items = api.bindings()
    if emit({"bindings": items}, output):
        return
    if not items:
        out.print("no bindings")
        return
    rows = [
        [
            item["consumerNamespace"],
            item.get("clusterId") or "",
            ", ".join(
                f"{r['url']}@{r.get('branch') or 'main'}:{r.get('path') or '.'}"
                for r in item.get("repositories") or []
            ),
            item.get("created") or "",
        ]
        for item in items
    ]
    print_table(["CONSUMER NAMESPACE", "CLUSTER ID", "REPOSITORIES", "CREATED"], rows)
    bindings = [r["object"] for i in items for r in i.get("repositories") or [] if "object" in r]
    if bindings:  # as `klutch-gitops get -A` shows them: Ready and why, applied, claims, refused
        out.print()
        for line in render(REPOSITORIES, bindings, Columns.table, True, ""):
            out.print(escape(line))


app.command("unbind")(unbind_command)
login_commands.register(app)
add_conventions(app)

__all__ = ["app", "bearer_token", "headless", "login", "logout", "main", "token"]


if __name__ == "__main__":
    main()
