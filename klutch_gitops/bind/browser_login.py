"""``klutch-bind login --browser``: the authorization code grant with PKCE (RFC 7636) and a
loopback redirect (RFC 8252); the code arrives on 127.0.0.1 and the ID token is bound to this
login by its nonce."""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from klutch_gitops.errors import KlutchError
from klutch_gitops.oidc_client import (
    Provider,
    authorization_url,
    describe_error,
    json_body,
    new_pkce,
    post_form,
    unverified_claims,
)

CALLBACK_PATH = "/callback"


def redirect_uri(port: int) -> str:
    """The loopback redirect URI (RFC 8252 §7.3): ``localhost`` on the callback's own port,
    which issuers accept for public clients on any port (Dex only for the name localhost)."""
    return f"http://localhost:{port}{CALLBACK_PATH}"


class CallbackRefused(ValueError):
    """A callback that does not belong to this login (wrong or missing ``state``)."""


def read_callback(query: str, state: str) -> str:
    """The authorization code from a callback's query, after checking that ``state`` matches.

    A wrong ``state`` raises CallbackRefused (the login keeps waiting for the real callback);
    an error from the issuer with the right ``state`` ends the login with a KlutchError.
    """
    params = {key: values[0] for key, values in parse_qs(query).items()}
    if not secrets.compare_digest(params.get("state", ""), state):
        raise CallbackRefused("the state of the callback does not match this login")
    if "error" in params:
        detail = params.get("error_description") or params["error"]
        raise KlutchError(
            f"the issuer refused the login: {detail}", "run 'klutch-bind login' again"
        )
    if not params.get("code"):
        raise CallbackRefused("the callback carries no authorization code")
    return params["code"]


class _CallbackServer(HTTPServer):
    """A loopback HTTP server that waits for the one callback carrying this login's ``state``."""

    def __init__(self, port: int, state: str) -> None:
        super().__init__(("127.0.0.1", port), _CallbackHandler)
        self.state = state
        self.code: str | None = None
        self.error: KlutchError | None = None
        self.done = threading.Event()


class _CallbackHandler(BaseHTTPRequestHandler):
    server: _CallbackServer

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path != CALLBACK_PATH or self.server.done.is_set():
            self._reply(404, "Not found.")
            return
        try:
            self.server.code = read_callback(url.query, self.server.state)
        except CallbackRefused as refused:
            self._reply(400, f"Refused: {refused}.")
            return
        except KlutchError as error:
            self.server.error = error
            self._reply(400, f"Login failed: {error.message}. Return to the terminal.")
        else:
            self._reply(200, "Logged in. You can close this tab and return to the terminal.")
        self.server.done.set()

    def _reply(self, status: int, text: str) -> None:
        body = f"<!doctype html><title>klutch-bind</title><p>{text}</p>".encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the request line holds the authorization code."""


def browser_login(
    http: httpx.Client,
    provider: Provider,
    client_id: str,
    scopes: str,
    open_browser: Callable[[str], object],
    port: int = 0,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Send the person to the issuer, receive the code on 127.0.0.1, exchange it with PKCE."""
    state, nonce = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    verifier, challenge = new_pkce()
    try:
        server = _CallbackServer(port, state)
    except OSError as error:
        raise KlutchError(
            f"cannot listen on 127.0.0.1:{port} for the login callback: {error}",
            "pick another --callback-port, or log in with --device",
        ) from None
    redirect = redirect_uri(server.server_port)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        open_browser(
            authorization_url(provider, client_id, redirect, scopes, state, nonce, challenge)
        )
        if not server.done.wait(timeout):
            raise KlutchError(
                f"no login callback arrived within {timeout:.0f}s",
                "run 'klutch-bind login' again, or use --device on a machine without a browser",
            )
    finally:
        server.shutdown()
        server.server_close()
    if server.error:
        raise server.error
    response = post_form(
        http,
        provider.token_endpoint,
        {
            "grant_type": "authorization_code",
            "code": server.code or "",
            "redirect_uri": redirect,
            "client_id": client_id,
            "code_verifier": verifier,
        },
    )
    body = json_body(response)
    if response.status_code != 200:
        raise KlutchError(
            f"the issuer refused the authorization code: {describe_error(body, response)}",
            "run 'klutch-bind login' again",
        )
    check_nonce(body.get("id_token", ""), nonce)
    return body


def check_nonce(id_token: str, nonce: str) -> None:
    """Bind the ID token to this login: a replayed or injected token carries another nonce."""
    if not secrets.compare_digest(str(unverified_claims(id_token).get("nonce", "")), nonce):
        raise KlutchError(
            "the ID token's nonce does not match this login (replayed or injected token)",
            "run 'klutch-bind login' again",
        )
