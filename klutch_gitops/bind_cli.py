"""The ``klutch-bind`` command line (also usable as the kubectl plugin ``kubectl-klutch_bind``).

``login`` obtains OIDC tokens for the bind API (device flow or browser flow with PKCE) and caches
them; ``token`` hands a fresh ID token to scripts; ``logout`` forgets them.
"""

from __future__ import annotations

import os
import sys
import webbrowser
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from klutch_gitops import __version__, oidc_client
from klutch_gitops.errors import KlutchError

app = typer.Typer(
    help="Bind an App Cluster and a Git repository to Klutch data-service APIs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

out = Console(soft_wrap=True, highlight=False)  # never break a URL a person will copy
err = Console(stderr=True, soft_wrap=True, highlight=False)

Issuer = Annotated[str, typer.Option("--issuer", help="The OIDC issuer URL of the bind API.")]


def main() -> None:
    """Entry point: a ``KlutchError`` becomes its message and fix on stderr, exit code 1."""
    try:
        app()
    except KlutchError as error:
        err.print(f"[red]error:[/red] {escape(error.message)}")
        if error.fix:
            err.print(f"[yellow]fix:[/yellow] {escape(error.fix)}")
        raise SystemExit(1) from None


@app.callback(invoke_without_command=True)
def root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit()


def headless() -> bool:
    """No browser can be opened here: stdin is not a terminal, or Linux without a display."""
    no_display = not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return not sys.stdin.isatty() or (sys.platform.startswith("linux") and no_display)


@app.command()
def login(
    issuer: Issuer,
    client_id: Annotated[str, typer.Option("--client-id", help="The public OIDC client.")],
    ca: Annotated[
        str | None, typer.Option("--ca", help="CA bundle for the issuer's TLS certificate.")
    ] = None,
    browser: Annotated[
        bool | None,
        typer.Option(
            "--browser/--device",
            help="Browser flow with PKCE, or device flow (default: device when headless).",
            show_default=False,
        ),
    ] = None,
    scopes: Annotated[str, typer.Option("--scopes")] = oidc_client.DEFAULT_SCOPES,
    callback_port: Annotated[
        int,
        typer.Option(
            "--callback-port",
            help="Browser flow: port of the callback on localhost; 0 picks a free one (RFC 8252).",
        ),
    ] = 0,
) -> None:
    """Log in to the issuer and cache the tokens (owner-only) for the other commands."""
    use_browser = not headless() if browser is None else browser
    with oidc_client.http_client(ca) as http:
        provider = oidc_client.discover(http, issuer)
        if use_browser:
            body = oidc_client.browser_login(
                http, provider, client_id, scopes, _open_browser, port=callback_port
            )
        else:
            device = oidc_client.start_device_authorization(http, provider, client_id, scopes)
            _show_device_code(device)
            with err.status("waiting for the login to be approved…"):
                body = oidc_client.poll_device_token(http, provider, client_id, device)
    tokens = oidc_client.tokens_from_response(issuer, client_id, ca, body)
    path = oidc_client.save(tokens)
    who = oidc_client.unverified_claims(tokens.id_token).get("email", "the issuer")
    out.print(f"[green]logged in[/green] as {escape(str(who))}; tokens cached in {path}")


def _show_device_code(device: oidc_client.DeviceCode) -> None:
    err.print(f"open      {device.verification_uri}")
    err.print(f"and enter [bold]{escape(device.user_code)}[/bold]")
    if device.verification_uri_complete:
        err.print(f"or open   {device.verification_uri_complete}")


def _open_browser(url: str) -> None:
    err.print(f"opening the browser; if it does not open, visit:\n{url}")
    webbrowser.open(url)


@app.command()
def logout(issuer: Issuer) -> None:
    """Forget the cached tokens of the issuer."""
    removed = oidc_client.remove(issuer)
    out.print(f"logged out of {issuer}" if removed else f"not logged in to {issuer}")


@app.command()
def token(
    issuer: Issuer,
    client_id: Annotated[
        str | None, typer.Option("--client-id", help="Needed when logged in with several.")
    ] = None,
) -> None:
    """Print a fresh ID token (refreshed if it expires within 60 s), for scripts."""
    typer.echo(oidc_client.fresh_id_token(issuer, client_id, min_valid=60))


if __name__ == "__main__":
    main()
