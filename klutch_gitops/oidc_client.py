"""The OAuth 2 / OIDC client side shared by ``klutch-bind`` and the bind API's browser flow: the
issuer's discovery document, the authorization URL with PKCE, the token endpoint's replies, and
the claims of an ID token.

``klutch-bind`` is a public client: it holds no secret, so the device authorization grant
(RFC 8628, ``bind/device_login.py``) and the authorization code grant with PKCE (RFC 7636) and a
loopback redirect (RFC 8252, ``bind/browser_login.py``) are the only safe ways to obtain tokens.
Tokens are cached per issuer and client, readable by the owner only, and refreshed with the
refresh token when the ID token is about to expire (``bind/token_cache.py``).

ID tokens are not signature-checked here: the bind API verifies every token it receives against
the issuer's keys. This client only decodes the claims it needs (``exp``, ``nonce``, ``email``).
"""

from __future__ import annotations

import base64
import json
import secrets
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from klutch_gitops.errors import KlutchError

DEFAULT_SCOPES = "openid email groups offline_access"


@dataclass(frozen=True)
class Provider:
    """The endpoints that the issuer's discovery document names."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    device_authorization_endpoint: str | None
    revocation_endpoint: str | None = None  # RFC 7009; Dex has none (dexidp/dex#1778)


def http_client(ca: str | None) -> httpx.Client:
    """An HTTPS client that trusts ``ca`` (a private issuer such as the local Dex) or the system;
    a CA file that cannot be used is a KlutchError naming it."""
    verify = tls_context(ca, "the issuer") if ca else True
    return httpx.Client(verify=verify, timeout=15.0)


def tls_context(ca: str, server: str = "the bind API") -> ssl.SSLContext:
    """Verify ``server`` against the CA bundle of ``--ca`` (PEM) instead of the system's."""
    try:
        return ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as error:
        reason = error.strerror if isinstance(error, OSError) and error.strerror else error
        raise KlutchError(
            f"cannot use --ca {ca}: {reason}",
            f"pass a readable PEM bundle of the CA that signed {server}'s certificate",
        ) from None


def discover(http: httpx.Client, issuer: str) -> Provider:
    url = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
    try:
        response = http.get(url)
        response.raise_for_status()
        document = response.json()
    except (httpx.HTTPError, ValueError) as error:
        raise KlutchError(
            f"cannot read the OIDC discovery document {url}: {error}",
            "check --issuer (the issuer URL, without /.well-known/…) and, for a private CA, --ca",
        ) from None
    if document.get("issuer") != issuer:
        raise KlutchError(
            f"{url} names the issuer {document.get('issuer')!r}, not {issuer!r}",
            f"pass --issuer {document.get('issuer')}",
        )
    try:
        return Provider(
            issuer=issuer,
            authorization_endpoint=document["authorization_endpoint"],
            token_endpoint=document["token_endpoint"],
            device_authorization_endpoint=document.get("device_authorization_endpoint"),
            revocation_endpoint=document.get("revocation_endpoint"),
        )
    except KeyError as missing:
        raise KlutchError(
            f"{url} names no {missing}", "check that --issuer is an OpenID Connect provider"
        ) from None


def new_pkce() -> tuple[str, str]:
    """A code verifier (RFC 7636 §4.1: 43 to 128 characters) and its S256 challenge."""
    verifier = secrets.token_urlsafe(64)
    return verifier, create_s256_code_challenge(verifier)


def authorization_url(
    provider: Provider,
    client_id: str,
    redirect: str,
    scopes: str,
    state: str,
    nonce: str,
    challenge: str,
) -> str:
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "scope": scopes,
        "state": state,
        "nonce": nonce,
        "code_challenge": challenge,
        "code_challenge_method": "S256",
    }
    separator = "&" if "?" in provider.authorization_endpoint else "?"
    return f"{provider.authorization_endpoint}{separator}{urlencode(query)}"


def unverified_claims(id_token: str) -> dict[str, Any]:
    """The claims of a JWT, signature not checked (see the module docstring for why)."""
    try:
        payload = id_token.split(".")[1]
        claims: dict[str, Any] = json.loads(
            base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        )
        return claims
    except (IndexError, ValueError) as error:
        raise KlutchError(
            f"the issuer returned an ID token that is not a JWT ({error})",
            "check that --issuer is an OpenID Connect provider and 'openid' is in --scopes",
        ) from None


def post_form(http: httpx.Client, url: str, data: dict[str, str]) -> httpx.Response:
    try:
        return http.post(url, data=data)
    except httpx.TransportError as error:
        raise KlutchError(
            f"cannot reach {url}: {error}",
            "check the network, --issuer and, for a private CA, --ca",
        ) from None


def json_body(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def describe_error(body: dict[str, Any], response: httpx.Response) -> str:
    """The OAuth error and its description, or the HTTP status: never the response's tokens."""
    if "error" in body:
        return ": ".join(str(body[k]) for k in ("error", "error_description") if body.get(k))
    return f"HTTP {response.status_code}"
