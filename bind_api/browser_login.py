"""The browser login's run-time parts and the checks of its callback.

The callback checks ``state`` against the login cookie, exchanges the code with the PKCE
verifier, verifies the ID token (signature, issuer, audience, expiry) and its ``nonce``, and
answers with the verified identity kept in the session cookie.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

import httpx
from fastapi import Request

from bind_api.browser_flow import LOGIN_COOKIE, FlowError
from bind_api.config import BrowserFlow
from bind_api.oidc import IssuerUnavailable, OIDCVerifier, TokenError
from bind_api.sessions import SessionCodec, SessionError, fingerprint, same
from klutch_gitops.errors import KlutchError
from klutch_gitops.oidc_client import Provider, discover


@dataclass
class BrowserLogin:
    """What the flow needs at run time: its config, keys, a verifier and an HTTP client."""

    flow: BrowserFlow
    client_secret: str
    codec: SessionCodec
    verifier: OIDCVerifier  # audience: the bind API's own client ID
    http: httpx.Client
    issuer: str
    _provider: Provider | None = None

    def provider(self) -> Provider:
        """The issuer's endpoints, discovered once (a KlutchError while it is unreachable)."""
        if self._provider is None:
            self._provider = discover(self.http, self.issuer)
        return self._provider

    @property
    def redirect_uri(self) -> str:
        return f"{self.flow.external_url}/callback"

    @property
    def secure_cookies(self) -> bool:
        return self.flow.external_url.startswith("https://")


def complete_login(login: BrowserLogin, request: Request) -> dict[str, Any]:
    """The callback's checks, in order, and the session claims of the verified person."""
    params = request.query_params
    try:
        state = login.codec.verify("state", params.get("state"))
        cookie = login.codec.open("login", request.cookies.get(LOGIN_COOKIE))
    except SessionError as error:
        raise FlowError(
            400,
            f"this callback does not belong to a login started in this browser: {error}",
            "start again from the CLI, in the browser that opens",
        ) from None
    if not same(state.get("login", ""), fingerprint(cookie["sid"])):
        raise FlowError(
            400,
            "the state of this callback belongs to another login",
            "start again from the CLI, in the browser that opens",
        )
    if params.get("error"):
        raise FlowError(
            400,
            f"the issuer refused the login: {params.get('error_description') or params['error']}",
            "start again from the CLI",
        )
    if not params.get("code"):
        raise FlowError(400, "the callback carries no authorization code", "start again")
    id_token = exchange_code(login, params["code"], cookie["verifier"])
    try:
        principal = login.verifier.verify(id_token)
    except IssuerUnavailable as error:
        raise FlowError(503, error.message, "try again when the issuer is reachable") from None
    except TokenError as error:
        raise FlowError(401, f"the issuer's ID token is not valid: {error.message}", "") from None
    if not same(str(principal.claims.get("nonce", "")), cookie["nonce"]):
        raise FlowError(401, "the ID token's nonce is not this login's", "start again")
    return {
        "sub": principal.subject,
        "iss": login.issuer,
        "email": principal.email,
        "groups": list(principal.groups),
        "redirect": cookie["redirect"],
        "session_id": cookie["session_id"],
        "cluster_id": cookie["cluster_id"],
        "csrf": secrets.token_urlsafe(24),
        "jti": secrets.token_urlsafe(24),  # the session's ID in the ledger
    }


def exchange_code(login: BrowserLogin, code: str, verifier: str) -> str:
    """The ID token for the code (client secret and PKCE verifier); never logs the tokens."""
    try:
        provider = login.provider()
        response = login.http.post(
            provider.token_endpoint,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": login.redirect_uri,
                "code_verifier": verifier,
            },
            auth=(login.flow.client_id, login.client_secret),
        )
    except KlutchError as error:
        raise FlowError(503, error.message, error.fix) from None
    except httpx.TransportError as error:
        raise FlowError(503, f"cannot reach the issuer: {error}", "try again later") from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    if response.status_code != 200 or not isinstance(body.get("id_token"), str):
        detail = body.get("error_description") or body.get("error") or response.status_code
        raise FlowError(
            400, f"the issuer did not exchange the code: {detail}", "start again from the CLI"
        )
    token: str = body["id_token"]
    return token
