"""Options that ``klutch-bind``'s binding commands share, and the bind API client they open."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from klutch_gitops.bind import token_cache
from klutch_gitops.bind.client import BindClient
from klutch_gitops.bind.output import Output
from klutch_gitops.errors import KlutchError

Url = Annotated[str, typer.Argument(help="The bind API's base URL, e.g. https://bind.example.com")]
OptionalIssuer = Annotated[
    str | None,
    typer.Option("--issuer", help="OIDC issuer whose cached login token to use (see 'login')."),
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
