"""``klutch-bind login``, ``logout``, ``token`` and ``config view``: OIDC tokens for the bind API
(device flow, or browser flow with PKCE), cached per issuer and client; and which bind API,
issuer and client each kubectl context uses (``contexts``), so later commands need no URL.
"""

from __future__ import annotations

import os
import sys
import webbrowser
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from klutch_gitops.bind import contexts, token_cache
from klutch_gitops.bind.browser_login import browser_login
from klutch_gitops.bind.device_login import (
    DeviceCode,
    poll_device_token,
    start_device_authorization,
)
from klutch_gitops.bind.options import Context, Issuer, OutputOption, Url, web_url
from klutch_gitops.bind.output import Output, emit, print_table
from klutch_gitops.cli_options import KubeconfigOption
from klutch_gitops.console import err, out
from klutch_gitops.errors import KlutchError
from klutch_gitops.oidc_client import DEFAULT_SCOPES, discover, http_client, unverified_claims

DEFAULT_CLIENT_ID = "klutch-bind"  # the CLI's public client, as the local stack's Dex registers it
LOGIN_EXAMPLE = (
    "e.g. klutch-bind login https://bind.example.com --issuer https://dex.example.com "
    "--client-id klutch-bind"
)


def headless() -> bool:
    """No browser can be opened here: stdin is not a terminal, or Linux without a display."""
    no_display = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return not sys.stdin.isatty() or (sys.platform.startswith("linux") and no_display)


def login(
    url: Url = None,
    issuer: Annotated[
        str | None,
        typer.Option(
            "--issuer", help="The OIDC issuer to log in to (default: remembered).", callback=web_url
        ),
    ] = None,
    client_id: Annotated[
        str | None,
        typer.Option("--client-id", help="The public OIDC client (default: remembered)."),
    ] = None,
    ca: Annotated[
        str | None,
        typer.Option("--ca", help="CA bundle for the issuer's TLS (default: remembered)."),
    ] = None,
    api_ca: Annotated[
        str | None,
        typer.Option("--api-ca", help="CA bundle for the bind API's TLS, remembered as its --ca."),
    ] = None,
    browser: Annotated[
        bool | None,
        typer.Option(
            "--browser/--device",
            help="Browser flow with PKCE, or device flow (default: device when headless).",
            show_default=False,
        ),
    ] = None,
    scopes: Annotated[str, typer.Option("--scopes")] = DEFAULT_SCOPES,
    callback_port: Annotated[
        int,
        typer.Option(
            "--callback-port",
            help="Browser flow: port of the callback on localhost; 0 picks a free one (RFC 8252).",
        ),
    ] = 0,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
) -> None:
    """Log in to the issuer and cache the tokens (owner-only); with URL, also remember the bind
    API, issuer and client for the kubectl context, so later commands need neither."""
    wanted = _wanted_login(url, issuer, client_id, ca, api_ca, kubeconfig, context)
    use_browser = not headless() if browser is None else browser
    token_cache.ready_dir()  # before the login: tokens that cannot be cached would be lost
    with http_client(wanted.ca) as http:
        provider = discover(http, wanted.issuer)
        if use_browser:
            body = browser_login(
                http, provider, wanted.client_id, scopes, _open_browser, port=callback_port
            )
        else:
            device = start_device_authorization(http, provider, wanted.client_id, scopes)
            _show_device_code(device)
            with err.status("waiting for the login to be approved…"):
                body = poll_device_token(http, provider, wanted.client_id, device)
    tokens = token_cache.tokens_from_response(wanted.issuer, wanted.client_id, wanted.ca, body)
    path = token_cache.save(tokens)
    who = unverified_claims(tokens.id_token).get("email", "the issuer")
    out.print(f"[green]logged in[/green] as {escape(str(who))}; tokens cached in {path}")
    if wanted.url:
        where = contexts.remember(wanted)
        out.print(f"{escape(contexts.describe(wanted.context))} uses {wanted.url} (in {where})")


def _wanted_login(
    url: str | None,
    issuer: str | None,
    client_id: str | None,
    ca: str | None,
    api_ca: str | None,
    kubeconfig: Path | None,
    context: str | None,
) -> contexts.Login:
    """The flags, completed by what is remembered for the kubectl context (same URL only), the
    client by default the CLI's usual one. An empty ``url`` in the answer means: log in without
    remembering anything."""
    name = contexts.NO_CONTEXT
    if url or not (issuer and client_id):
        name = contexts.kubectl_context(kubeconfig, context)
        known = contexts.find(name)
        if known is not None and (url is None or url.rstrip("/") == known.url.rstrip("/")):
            url = known.url
            issuer, client_id = issuer or known.issuer, client_id or known.client_id
            ca, api_ca = ca or known.ca, api_ca or known.api_ca
    if not issuer:
        raise KlutchError(
            f"login needs --issuer: nothing is remembered for {contexts.describe(name)}",
            LOGIN_EXAMPLE,
        )
    client_id = client_id or DEFAULT_CLIENT_ID
    return contexts.Login(name, url or "", issuer, client_id, ca, api_ca)


def _show_device_code(device: DeviceCode) -> None:
    err.print(f"open      {device.verification_uri}")
    err.print(f"and enter [bold]{escape(device.user_code)}[/bold]")
    if device.verification_uri_complete:
        err.print(f"or open   {device.verification_uri_complete}")


def _open_browser(url: str) -> None:
    err.print(f"opening the browser; if it does not open, visit:\n{url}")
    webbrowser.open(url)


def logout(
    issuer: Issuer = None, kubeconfig: KubeconfigOption = None, context: Context = None
) -> None:
    """Revoke the refresh tokens at the issuer where it supports RFC 7009, forget them, and
    forget every kubectl context's remembered login with that issuer."""
    if issuer is None:
        issuer = _remembered(kubeconfig, context).issuer
    entries = token_cache.cached(issuer)
    forgotten = [login.context for login in contexts.load() if login.issuer == issuer]
    for name in forgotten:
        contexts.forget(name)
    if forgotten:
        out.print(f"forgot the login of {', '.join(map(contexts.describe, forgotten))}")
    if not entries:
        out.print(f"not logged in to {issuer}")
        return
    with http_client(entries[0].ca) as http:
        provider = discover(http, issuer)
        revoked = [token_cache.revoke(http, provider, tokens) for tokens in entries]
    token_cache.remove(issuer)
    if all(revoked):
        out.print(f"logged out of {issuer}; the refresh token was revoked at the issuer")
    elif provider.revocation_endpoint is None:
        out.print(
            f"logged out of {issuer} here; the issuer does not support token revocation (its "
            "discovery document names no revocation_endpoint, RFC 7009), so the refresh token "
            "stays valid there until it expires or an administrator revokes it"
        )
    else:
        out.print(f"logged out of {issuer}; there was no refresh token to revoke")


def _remembered(kubeconfig: Path | None, context: str | None) -> contexts.Login:
    name = contexts.kubectl_context(kubeconfig, context)
    login = contexts.find(name)
    if login is None:
        raise KlutchError(
            f"no login remembered for {contexts.describe(name)}",
            "pass --issuer, or choose the kubectl context with --context",
        )
    return login


def token(
    issuer: Issuer = None,
    client_id: Annotated[
        str | None, typer.Option("--client-id", help="Needed when logged in with several.")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: Context = None,
) -> None:
    """Print a fresh ID token (refreshed if it expires within 60 s), for scripts."""
    if issuer is None:
        login = _remembered(kubeconfig, context)
        issuer, client_id = login.issuer, client_id or login.client_id
    typer.echo(token_cache.fresh_id_token(issuer, client_id, min_valid=60))


config_app = typer.Typer(
    help="What 'login' remembered: the bind API, issuer and client of each kubectl context.",
    no_args_is_help=True,
)


@config_app.command("view")
def view(
    output: OutputOption = Output.text, kubeconfig: KubeconfigOption = None, context: Context = None
) -> None:
    """Show the remembered logins (no tokens); * marks the kubectl context in use."""
    try:
        current: str | None = contexts.kubectl_context(kubeconfig, context)
    except KlutchError:
        current = None  # an unreadable kubeconfig does not hide what is remembered
    logins = contexts.load()
    data = {"file": str(contexts.config_path()), "current-context": current}
    if emit(data | contexts.as_data(logins), output):
        return
    if not logins:
        out.print(f"nothing remembered in {contexts.config_path()}; {LOGIN_EXAMPLE}")
        return
    rows = [
        [
            "*" if login.context == current else "",
            login.context or "-",
            login.url,
            login.issuer,
            login.client_id,
        ]
        for login in sorted(logins, key=lambda item: item.context)
    ]
    print_table(["CURRENT", "CONTEXT", "SERVER", "ISSUER", "CLIENT"], rows)


def register(app: typer.Typer) -> None:
    """Add login, logout, token and config to ``klutch-bind`` (bind/cli.py does)."""
    app.command()(login)
    app.command()(logout)
    app.command()(token)
    app.add_typer(config_app, name="config")
