"""Options that ``klutch-bind``'s binding commands share, and the bind API client they open."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import httpx
import typer

from klutch_gitops.bind import token_cache
from klutch_gitops.bind.client import BindClient
from klutch_gitops.bind.output import Output
from klutch_gitops.errors import KlutchError


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
    str,
    typer.Argument(help="The bind API's base URL, e.g. https://bind.example.com", callback=web_url),
]
Issuer = Annotated[
    str, typer.Option("--issuer", help="The OIDC issuer URL of the bind API.", callback=web_url)
]
OptionalIssuer = Annotated[
    str | None,
    typer.Option(
        "--issuer",
        help="OIDC issuer whose cached login token to use (see 'login').",
        callback=web_url,
    ),
]
Token = Annotated[
    str | None,
    typer.Option(
        "--token", envvar="KLUTCH_BIND_TOKEN", help="An ID token to use instead (automation)."
    ),
]
ClientId = Annotated[
    str | None, typer.Option("--client-id", help="Needed when logged in with several clients.")
]
Ca = Annotated[str | None, typer.Option("--ca", help="CA bundle for the bind API's TLS.")]
OutputOption = Annotated[Output, typer.Option("-o", "--output")]
Kubeconfig = Annotated[
    Path | None, typer.Option("--kubeconfig", help="Kubeconfig of the App Cluster.")
]
Context = Annotated[str | None, typer.Option("--context", help="Context in the kubeconfig.")]


def bearer_token(issuer: str | None, token: str | None, client_id: str | None) -> str:
    """``--token`` as given, or the cached login of ``--issuer`` (refreshed when due)."""
    if token:
        return token
    if not issuer:
        raise KlutchError(
            "no token: pass --issuer (after 'klutch-bind login') or --token",
            'e.g. --issuer https://dex.example.com, or --token "$(klutch-bind token --issuer …)"',
        )
    return token_cache.fresh_id_token(issuer, client_id, min_valid=60)


def open_client(
    url: str, issuer: str | None, token: str | None, client_id: str | None, ca: str | None
) -> BindClient:
    return BindClient(url, bearer_token(issuer, token, client_id), ca=ca)
