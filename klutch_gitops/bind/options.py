"""Options that ``klutch-bind``'s commands share, where a missing URL, issuer or client comes from
(the login remembered for the kubectl context), and the bind API client they open.

Explicit flags win over what ``login`` remembered. An ID token never comes from the command line
(argv is visible to every user of the machine, and stays in shell history): ``--token-file``, else
``$KLUTCH_BIND_TOKEN``, else the cached login of the issuer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
from typer._click import Context as ClickContext  # typer 0.29 vendors click
from typer._click.exceptions import UsageError
from typer.core import TyperGroup

from klutch_gitops.bind import app_cluster, contexts, token_cache
from klutch_gitops.bind.client import BindClient
from klutch_gitops.bind.output import Output
from klutch_gitops.bind.request import read_text
from klutch_gitops.cli_options import current_context
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube

TOKEN_ENV = "KLUTCH_BIND_TOKEN"  # noqa: S105 - the variable's name, not a token
TOKEN_FIX = (
    f"put the ID token in a file and pass --token-file FILE ('-' reads stdin), or set ${TOKEN_ENV}"
    ", or run 'klutch-bind login' once"
)
LOGIN_FIX = "run 'klutch-bind login URL --issuer ISSUER --client-id CLIENT' for this context"


def web_url(value: str | None) -> str | None:
    """An http(s) URL with a host, else a usage error naming the option (exit 2)."""
    if value is None:
        return None
    try:
        url = httpx.URL(value)
    except httpx.InvalidURL as error:
        raise typer.BadParameter(f"{value!r} is not a URL ({error})") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise typer.BadParameter(f"{value!r} is not an http(s) URL; e.g. https://bind.example.com")
    return value


Url = Annotated[
    str | None,
    typer.Argument(
        metavar="URL",
        help="The bind API's base URL, e.g. https://bind.example.com (default: the one 'login' "
        "remembered for the kubectl context)",
        callback=web_url,
        show_default=False,
    ),
]
Issuer = Annotated[
    str | None,
    typer.Option(
        "--issuer",
        help="The OIDC issuer whose cached login to use (default: remembered by 'login').",
        callback=web_url,
    ),
]
TokenFile = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        help=f"File holding an ID token ('-' reads stdin), for automation; or set ${TOKEN_ENV}. "
        "Never on the command line.",
    ),
]
ClientId = Annotated[
    str | None,
    typer.Option("--client-id", help="The OIDC client of the login (default: remembered)."),
]
Ca = Annotated[
    str | None,
    typer.Option("--ca", help="CA bundle for the bind API's TLS (default: remembered)."),
]
OutputOption = Annotated[Output, typer.Option("-o", "--output")]
Context = Annotated[
    str | None,
    typer.Option(
        "--context", help="kubectl context: the App Cluster and the login remembered for it."
    ),
]


class NoSecretsOnArgv(TyperGroup):
    """``klutch-bind``'s command group: an old ``--token VALUE`` is refused before anything runs,
    with what to use instead (exit 2, a usage error)."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: ClickContext | None = None,
        **extra: Any,
    ) -> ClickContext:
        for arg in args:
            if arg == "--":
                break
            if arg == "--token" or arg.startswith("--token="):
                raise UsageError(
                    f"--token is gone: a token on the command line is visible to every user of "
                    f"this machine and stays in shell history; {TOKEN_FIX}"
                )
        return super().make_context(info_name, args, parent, **extra)


def app_kube(kubeconfig: Path | None, context: str | None) -> Kube:
    """The App Cluster, once it answers: ``--context``, else the current context as kubectl picks
    it from several $KUBECONFIG files (the first file that sets it; the kubernetes client would
    take the last)."""
    if context is None and kubeconfig is None:
        context = current_context(None)
    return app_cluster.answering(app_cluster.app_kube(kubeconfig, context))


@dataclass(frozen=True)
class Target:
    """The bind API a command calls, and whose login (issuer, client) authenticates it."""

    url: str
    issuer: str | None
    client_id: str | None
    ca: str | None
    context: str | None = None  # the kubectl context whose login filled the gaps


def given_token(token_file: Path | None) -> str | None:
    """The ID token from ``--token-file`` or ``$KLUTCH_BIND_TOKEN``, else None (use the cache)."""
    if token_file is not None:
        token = read_text(token_file, "--token-file").strip()
        if not token:
            raise KlutchError(f"--token-file {token_file} is empty", TOKEN_FIX)
        return token
    return os.environ.get(TOKEN_ENV, "").strip() or None


def target(
    url: str | None,
    issuer: str | None,
    client_id: str | None,
    ca: str | None,
    kubeconfig: Path | None,
    context: str | None,
    need_issuer: bool = True,
) -> Target:
    """The flags, with what ``login`` remembered for the kubectl context filling the gaps; the
    remembered issuer, client and CA apply only to the remembered URL."""
    if url and (issuer or not need_issuer):
        return Target(url, issuer, client_id, ca)
    name = contexts.kubectl_context(kubeconfig, context)
    login = contexts.find(name)
    if login is None or (url and url.rstrip("/") != login.url.rstrip("/")):
        what = "no bind API URL" if not url else f"no login for {url}"
        raise KlutchError(f"{what} remembered for {contexts.describe(name)}", LOGIN_FIX)
    return Target(
        url or login.url,
        issuer or login.issuer,
        client_id or login.client_id,
        ca or login.api_ca,
        name,
    )


def bearer_token(issuer: str | None, token: str | None, client_id: str | None) -> str:
    """``token`` (read from --token-file or the environment), else the cached login of the
    issuer (refreshed when due)."""
    if token:
        return token
    if not issuer:
        raise KlutchError(
            "no token: pass --issuer (or 'klutch-bind login' once for this context)",
            f"{LOGIN_FIX}; or {TOKEN_FIX}",
        )
    return token_cache.fresh_id_token(issuer, client_id, min_valid=60)


def open_client(
    url: str | None,
    issuer: str | None,
    token_file: Path | None,
    client_id: str | None,
    ca: str | None,
    kubeconfig: Path | None = None,
    context: str | None = None,
) -> BindClient:
    """A client of the bind API the flags (or the remembered login) name."""
    token = given_token(token_file)
    chosen = target(url, issuer, client_id, ca, kubeconfig, context, need_issuer=token is None)
    bearer = bearer_token(chosen.issuer, token, chosen.client_id)
    return BindClient(chosen.url, bearer, ca=chosen.ca)
