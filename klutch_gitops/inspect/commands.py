"""The typer commands ``get``, ``reconcile``, ``suspend`` and ``resume``; klutch_gitops/cli.py
registers them on ``klutch-gitops``. Flags follow kubectl's: --kubeconfig, --context, -n, -A, -o,
-w."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from klutch_gitops.cli_options import KubeconfigOption
from klutch_gitops.console import out
from klutch_gitops.inspect.table import Output

if TYPE_CHECKING:  # the kubernetes client loads when a command runs, not for --help
    from klutch_gitops.inspect.access import Cluster
    from klutch_gitops.kube.client import Resource

Context = Annotated[str | None, typer.Option("--context", help="Kubeconfig context to use")]
Namespace = Annotated[
    str | None,
    typer.Option("--namespace", "-n", help="Namespace (default: the context's namespace)"),
]
Repo = Annotated[str, typer.Argument(help="NAME (in -n NAMESPACE) or NAMESPACE/NAME")]
Timeout = Annotated[
    float, typer.Option("--timeout", help="Seconds to wait for the reconciler's answer")
]
NoWait = Annotated[bool, typer.Option("--no-wait", help="Request and return, do not wait")]


class What(StrEnum):
    repositories = "repositories"
    repos = "repos"
    repository = "repository"
    repositorybindings = "repositorybindings"
    claims = "claims"


def say(line: str) -> None:
    out.print(escape(line))


def get(
    what: Annotated[What, typer.Argument(help="repositories (repos) or claims")] = What.repos,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
    namespace: Namespace = None,
    all_namespaces: Annotated[
        bool, typer.Option("--all-namespaces", "-A", help="Every namespace you may list")
    ] = False,
    output: Annotated[Output, typer.Option("--output", "-o", help="Format")] = Output.table,
    watch: Annotated[bool, typer.Option("--watch", "-w", help="Print changes as they come")] = (
        False
    ),
    reconciler: Annotated[
        str | None,
        typer.Option(
            "--reconciler",
            help="Show a reconciler's registrations (config file ones too) from URL/registrations",
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file", help="The reconciler's metricsToken (or $KLUTCH_GITOPS_METRICS_TOKEN)"
        ),
    ] = None,
) -> None:
    """RepositoryBindings on the Control Plane, or (get claims) the App claims on the App
    Cluster, with why each is not Ready; with --reconciler, every registration it works on."""
    if reconciler is not None:
        _registrations(what, reconciler, token_file, output, watch)
        return
    from klutch_gitops.inspect.access import CALL_ERRORS, refused
    from klutch_gitops.inspect.show import CLAIMS, REPOSITORIES, render, watch_lines, widths_of

    cluster = _connect(kubeconfig, context, namespace)
    where = None if all_namespaces else cluster.namespace
    suffix = "" if all_namespaces else f" in {cluster.namespace} namespace"
    view = CLAIMS if what is What.claims else REPOSITORIES
    resource, objects, follow = _list(cluster, what is What.claims, where)
    table = render(view, objects, output, all_namespaces, suffix)
    for line in table:
        say(line)
    if not watch:
        return
    widths = widths_of(table, view, output is Output.wide, all_namespaces)
    try:
        for line in watch_lines(view, follow(), output, all_namespaces, widths):
            say(line)
    except CALL_ERRORS as error:
        raise refused(error, "watch", resource, where) from None
    except KeyboardInterrupt:
        return


def _connect(kubeconfig: Path | None, context: str | None, namespace: str | None) -> Cluster:
    """The cluster of ``--context``, else of the current context as kubectl picks it from several
    $KUBECONFIG files: the first file that sets it (cli_options.current_context)."""
    from klutch_gitops.cli_options import current_context
    from klutch_gitops.inspect.access import connect

    if context is None and (kubeconfig is None or kubeconfig.is_file()):
        context = current_context(kubeconfig)
    return connect(kubeconfig, context, namespace)


def _registrations(
    what: What, url: str, token_file: Path | None, output: Output, watch: bool
) -> None:
    from klutch_gitops.inspect import registrations
    from klutch_gitops.inspect.show import REPOSITORIES, render

    if what is What.claims or watch:
        raise typer.BadParameter(
            "--reconciler shows registrations once: no 'claims', no --watch",
            param_hint="--reconciler",
        )
    shown = registrations.fetch(url, registrations.token(token_file))
    for line in render(REPOSITORIES, shown, output, False, f" at {url}"):
        say(line)


def _list(
    cluster: Cluster, want_claims: bool, namespace: str | None
) -> tuple[Resource, list[dict[str, Any]], Callable[[], Iterator[dict[str, Any]]]]:
    """(the resource a refusal names, the objects, their changes from the list on)."""
    from klutch_gitops.apis import ALL_CLAIMS, REPOSITORY_BINDINGS, REPOSITORY_LABEL
    from klutch_gitops.inspect import claims
    from klutch_gitops.inspect.access import CALL_ERRORS, refused
    from klutch_gitops.inspect.watch import changes, merged_changes

    if want_claims:
        kinds = ALL_CLAIMS
        try:
            found, versions = claims.list_claims(cluster.kube, namespace)
        except CALL_ERRORS as error:
            raise refused(error, "list", kinds, namespace) from None
        label = REPOSITORY_LABEL
        return kinds, found, lambda: merged_changes(cluster.kube, versions, namespace, label)
    try:
        items, version = cluster.kube.list(REPOSITORY_BINDINGS, namespace)
    except CALL_ERRORS as error:
        raise refused(error, "list", REPOSITORY_BINDINGS, namespace) from None
    items = [
        {"apiVersion": REPOSITORY_BINDINGS.api_version, "kind": "RepositoryBinding", **item}
        for item in items
    ]
    return (
        REPOSITORY_BINDINGS,
        sorted(items, key=_order),
        lambda: changes(cluster.kube, REPOSITORY_BINDINGS, namespace, version),
    )


def _order(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _target(
    repo: str, kubeconfig: Path | None, context: str | None, namespace: str | None
) -> tuple[Cluster, str, str]:
    from klutch_gitops.inspect import steer

    cluster = _connect(kubeconfig, context, namespace)
    ns, name = steer.parse_repo(repo, cluster.namespace, explicit_namespace=namespace is not None)
    return cluster, ns, name


def _answer(cluster: Cluster, ns: str, name: str, value: str, timeout: float) -> None:
    from klutch_gitops.inspect import steer

    say(f"► waiting for RepositoryBinding {ns}/{name} to answer the request {value}")
    obj = steer.wait_handled(cluster.kube, ns, name, value, timeout)
    say(f"✔ {steer.check_ready(obj)}")


def reconcile(
    repo: Repo,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
    namespace: Namespace = None,
    timeout: Timeout = 60.0,
    no_wait: NoWait = False,
) -> None:
    """Fetch and apply a RepositoryBinding now, and wait until the reconciler has."""
    from klutch_gitops.inspect import steer

    cluster, ns, name = _target(repo, kubeconfig, context, namespace)
    value = steer.request_reconcile(cluster.kube, ns, name)
    say(f"► reconcile requested for RepositoryBinding {ns}/{name}")
    if not no_wait:
        _answer(cluster, ns, name, value, timeout)


def suspend(
    repo: Repo,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
    namespace: Namespace = None,
) -> None:
    """Stop fetching, applying and writing back for a RepositoryBinding until resumed."""
    from klutch_gitops.inspect import steer

    cluster, ns, name = _target(repo, kubeconfig, context, namespace)
    steer.suspend(cluster.kube, ns, name)
    say(f"✔ RepositoryBinding {ns}/{name} suspended")


def resume(
    repo: Repo,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
    namespace: Namespace = None,
    timeout: Timeout = 60.0,
    no_wait: NoWait = False,
) -> None:
    """Resume a suspended RepositoryBinding, reconcile it now, and wait for the pass."""
    from klutch_gitops.inspect import steer

    cluster, ns, name = _target(repo, kubeconfig, context, namespace)
    value = steer.resume(cluster.kube, ns, name)
    say(f"► RepositoryBinding {ns}/{name} resumed")
    if not no_wait:
        _answer(cluster, ns, name, value, timeout)


def register(app: typer.Typer) -> None:
    """Add the four commands to ``app`` (klutch_gitops/cli.py does, and the tests)."""
    app.command()(get)
    app.command()(reconcile)
    app.command()(suspend)
    app.command()(resume)
