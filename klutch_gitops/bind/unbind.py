"""``klutch-bind unbind``: show what goes, confirm, delete, wait until the Control Plane is clean.

Unbinding deletes the consumer namespace, its mapped namespaces and every claim in them — every
database of the binding. So the command lists all of it first (from the bind API, which
authorizes the listing as it does the deletion), asks on a terminal or needs ``--yes``, and leaves
deletion-protected claims alone unless ``--force``: the bind API refuses those itself (409).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import Annotated, Any

import typer
from rich.markup import escape

from klutch_gitops.bind import app_cluster
from klutch_gitops.bind.client import BindClient
from klutch_gitops.bind.options import (
    Ca,
    ClientId,
    Context,
    Issuer,
    OutputOption,
    TokenFile,
    app_kube,
    open_client,
    web_url,
)
from klutch_gitops.bind.output import Output, emit
from klutch_gitops.cli_options import KubeconfigOption
from klutch_gitops.console import err, out
from klutch_gitops.errors import KlutchError

POLL_SECONDS = 1.0


def plan_lines(plan: Mapping[str, Any]) -> list[str]:
    """What an unbind deletes, one line each: namespaces, then claims marked database/protected."""
    consumer = plan["consumerNamespace"]
    lines = [f"unbinding {consumer} deletes on the Control Plane:"]
    for namespace in plan.get("namespaces") or []:
        role = "consumer namespace" if namespace == consumer else "mapped namespace"
        lines.append(f"  namespace {namespace} ({role})")
    claims = plan.get("claims") or []
    for claim in claims:
        marks = [
            m
            for m, on in (
                ("database", claim["database"]),
                ("deletion-protected", claim["protected"]),
            )
            if on
        ]
        suffix = f" [{', '.join(marks)}]" if marks else ""
        lines.append(f"  {claim['kind']} {claim['namespace']}/{claim['name']}{suffix}")
    for kind in plan.get("unlisted") or []:
        lines.append(f"  {kind} in those namespaces (the bind API may not list them)")
    databases = sum(1 for c in claims if c["database"])
    protected = sum(1 for c in claims if c["protected"])
    lines.append(f"{len(claims)} claim(s), {databases} database(s), {protected} deletion-protected")
    return lines


def remaining_summary(plan: Mapping[str, Any] | None) -> str:
    """One progress line: what still exists of the binding, or that nothing does."""
    if plan is None:
        return "nothing remains"
    namespaces = plan.get("namespaces") or []
    claims = plan.get("claims") or []
    return (
        f"remaining: {len(namespaces)} namespace(s) ({', '.join(namespaces)}), "
        f"{len(claims)} claim(s)"
    )


def confirm(yes: bool, force: bool, plan: Mapping[str, Any], interactive: bool) -> None:
    """Go on only when confirmed: ``--yes``, or yes at the prompt; never without a terminal."""
    protected = [c for c in plan.get("claims") or [] if c["protected"]]
    if protected and not force and not yes:
        raise KlutchError(
            f"{len(protected)} claim(s) are deletion-protected; nothing was deleted",
            "remove their deletion-protection annotation, or pass --force to delete them too",
        )
    if yes:
        return
    if not interactive:
        raise KlutchError(
            "unbind deletes everything listed and needs confirmation, but stdin is not a "
            "terminal; nothing was deleted: pass --yes to unbind without a prompt"
        )
    if not typer.confirm(f"Delete all of this ({plan['consumerNamespace']})?", err=True):
        raise KlutchError("not confirmed; nothing was deleted")


def wait_until_gone(
    api: BindClient,
    consumer: str,
    timeout: float,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Mapping[str, Any] | None:
    """Poll the bind API until the binding is gone; prints each change of what remains on
    stderr. Returns what remains at ``timeout``, or None when the Control Plane is clean."""
    deadline = clock() + timeout
    shown = ""
    with err.status(f"deleting {consumer}…") as status:
        while (left := api.unbind_plan(consumer)) is not None and clock() < deadline:
            line = remaining_summary(left)
            if line != shown:
                err.print(f"  {escape(line)}")
                status.update(f"deleting {consumer}: {escape(line)}")
                shown = line
            sleep(POLL_SECONDS)
    return left


def _url_and_consumer(targets: list[str]) -> tuple[str | None, str]:
    """``CONSUMER`` or ``URL CONSUMER``: the URL may be left to the remembered login."""
    if len(targets) == 1:
        return None, targets[0]
    if len(targets) == 2:
        return web_url(targets[0]), targets[1]
    raise typer.BadParameter(
        f"expected [URL] CONSUMER, got {len(targets)} arguments", param_hint="[URL] CONSUMER"
    )


def unbind_command(
    targets: Annotated[
        list[str],
        typer.Argument(
            metavar="[URL] CONSUMER",
            help="The bind API's base URL (default: remembered by 'login') and the consumer "
            "namespace (see 'status').",
            show_default=False,
        ),
    ],
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete without asking (needed without a TTY).")
    ] = False,
    force: Annotated[
        bool, typer.Option("--force", help="Also delete deletion-protected claims.")
    ] = False,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0, help="Seconds to wait until all is gone.")
    ] = 300.0,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
    issuer: Issuer = None,
    token_file: TokenFile = None,
    client_id: ClientId = None,
    ca: Ca = None,
    output: OutputOption = Output.text,
) -> None:
    """Remove a binding and everything it holds on the Control Plane, after listing it and a
    confirmation; with --kubeconfig also its App Cluster objects."""
    url, consumer = _url_and_consumer(targets)
    kube = app_kube(kubeconfig, context) if kubeconfig or context else None
    with open_client(url, issuer, token_file, client_id, ca, kubeconfig, context) as api:
        url = api.base_url
        plan = api.unbind_plan(consumer)
        if plan is None:
            raise KlutchError(
                f"no binding {consumer} of yours",
                f"run 'klutch-bind status {url}' to list your bindings",
            )
        for line in plan_lines(plan):
            err.print(escape(line))
        confirm(yes, force, plan, sys.stdin.isatty())
        deleted = api.unbind(consumer, force=force)
        left = wait_until_gone(api, consumer, timeout)
    if left is not None:
        raise KlutchError(
            f"unbinding {consumer} did not finish in {timeout:.0f}s; {remaining_summary(left)}",
            "check that the APIServiceNamespace controller runs (its finalizer deletes the "
            f"mapped namespaces), then run 'klutch-bind unbind {url} {consumer}' again",
        )
    err.print("the Control Plane is clean: nothing of the binding remains")
    removed = app_cluster.remove_app_objects(kube, consumer) if kube else []
    if emit({"consumerNamespace": consumer, "deleted": deleted, "removed": removed}, output):
        return
    out.print(f"[green]unbound[/green] {consumer}")
    for ref in removed:
        out.print(f"  removed  {ref}")
