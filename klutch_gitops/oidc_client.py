"""The OAuth 2 / OIDC client of ``klutch-bind``: device flow, browser flow with PKCE, token cache.

The CLI is a public client: it holds no secret, so the device authorization grant (RFC 8628) and
the authorization code grant with PKCE (RFC 7636) and a loopback redirect (RFC 8252) are the only
safe ways to obtain tokens. Tokens are cached per issuer and client, readable by the owner only,
and refreshed with the refresh token when the ID token is about to expire.

ID tokens are not signature-checked here: the bind API verifies every token it receives against
the issuer's keys. This client only decodes the claims it needs (``exp``, ``nonce``, ``email``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import secrets
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from authlib.oauth2.rfc7636 import create_s256_code_challenge

from klutch_gitops.errors import KlutchError

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
DEFAULT_SCOPES = "openid email groups offline_access"
CALLBACK_PATH = "/callback"
SLOW_DOWN_SECONDS = 5  # RFC 8628 §3.5: add 5 seconds to the interval on every slow_down
LOGIN_AGAIN = "run 'klutch-bind login --issuer {issuer} --client-id {client_id}' again"


@dataclass(frozen=True)
class Provider:
    """The endpoints that the issuer's discovery document names."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    device_authorization_endpoint: str | None
    revocation_endpoint: str | None = None  # RFC 7009; Dex has none (dexidp/dex#1778)


@dataclass(frozen=True)
class DeviceCode:
    """What the person needs to approve the login elsewhere, and what the CLI polls with."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    interval: int
    expires_in: int


@dataclass(frozen=True)
class Tokens:
    """One cache entry. ``ca`` is the CA bundle for the issuer's TLS, needed again to refresh."""

    issuer: str
    client_id: str
    id_token: str
    refresh_token: str | None
    expires_at: float
    ca: str | None = None

    def expires_within(self, seconds: float, now: float | None = None) -> bool:
        return self.expires_at - (time.time() if now is None else now) <= seconds


def http_client(ca: str | None) -> httpx.Client:
    """An HTTPS client that trusts ``ca`` (a private issuer such as the local Dex) or the system."""
    verify = ssl.create_default_context(cafile=ca) if ca else True
    return httpx.Client(verify=verify, timeout=15.0)


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


# --- device authorization grant (RFC 8628) ---------------------------------------------------


def start_device_authorization(
    http: httpx.Client, provider: Provider, client_id: str, scopes: str
) -> DeviceCode:
    if not provider.device_authorization_endpoint:
        raise KlutchError(
            f"the issuer {provider.issuer} offers no device authorization endpoint",
            "log in with --browser",
        )
    response = _post(
        http, provider.device_authorization_endpoint, {"client_id": client_id, "scope": scopes}
    )
    body = _json(response)
    if response.status_code != 200:
        raise KlutchError(
            f"the issuer refused the device authorization: {_describe(body, response)}",
            f"check that the client {client_id!r} exists and may use the device flow",
        )
    return DeviceCode(
        device_code=body["device_code"],
        user_code=body["user_code"],
        verification_uri=body["verification_uri"],
        verification_uri_complete=body.get("verification_uri_complete"),
        interval=int(body.get("interval", 5)),
        expires_in=int(body["expires_in"]),
    )


def poll_device_token(
    http: httpx.Client,
    provider: Provider,
    client_id: str,
    device: DeviceCode,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Poll the token endpoint at the issuer's pace until the person approves or refuses."""
    interval = device.interval
    deadline = clock() + device.expires_in
    data = {"grant_type": DEVICE_GRANT, "device_code": device.device_code, "client_id": client_id}
    while True:
        response = _post(http, provider.token_endpoint, data)
        body = _json(response)
        if response.status_code == 200:
            return body
        error = body.get("error")
        if error == "slow_down":
            interval += SLOW_DOWN_SECONDS
        elif error == "access_denied":
            raise KlutchError(
                "the login was refused in the browser", "run 'klutch-bind login' again"
            )
        elif error == "expired_token":
            raise _expired()
        elif error != "authorization_pending":
            raise KlutchError(
                f"the issuer refused the device login: {_describe(body, response)}",
                "run 'klutch-bind login' again",
            )
        if clock() + interval > deadline:
            raise _expired()
        sleep(interval)


def _expired() -> KlutchError:
    return KlutchError(
        "the user code expired before the login was approved",
        "run 'klutch-bind login' again and approve it in time",
    )


# --- authorization code grant with PKCE and a loopback redirect -------------------------------


def new_pkce() -> tuple[str, str]:
    """A code verifier (RFC 7636 §4.1: 43 to 128 characters) and its S256 challenge."""
    verifier = secrets.token_urlsafe(64)
    return verifier, create_s256_code_challenge(verifier)


def redirect_uri(port: int) -> str:
    """The loopback redirect URI (RFC 8252 §7.3): ``localhost`` on the callback's own port,
    which issuers accept for public clients on any port (Dex only for the name localhost)."""
    return f"http://localhost:{port}{CALLBACK_PATH}"


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
    response = _post(
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
    body = _json(response)
    if response.status_code != 200:
        raise KlutchError(
            f"the issuer refused the authorization code: {_describe(body, response)}",
            "run 'klutch-bind login' again",
        )
    check_nonce(body.get("id_token", ""), nonce)
    return body


def unverified_claims(id_token: str) -> dict[str, Any]:
    """The claims of a JWT, signature not checked (see the module docstring for why)."""
    try:
        payload = id_token.split(".")[1]
        return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as error:
        raise KlutchError(
            f"the issuer returned an ID token that is not a JWT ({error})",
            "check that --issuer is an OpenID Connect provider and 'openid' is in --scopes",
        ) from None


def check_nonce(id_token: str, nonce: str) -> None:
    """Bind the ID token to this login: a replayed or injected token carries another nonce."""
    if not secrets.compare_digest(str(unverified_claims(id_token).get("nonce", "")), nonce):
        raise KlutchError(
            "the ID token's nonce does not match this login (replayed or injected token)",
            "run 'klutch-bind login' again",
        )


# --- tokens, refresh and cache ------------------------------------------------------------------


def tokens_from_response(
    issuer: str,
    client_id: str,
    ca: str | None,
    body: dict[str, Any],
    previous_refresh_token: str | None = None,
    now: float | None = None,
) -> Tokens:
    """A cache entry from a token response; the ID token's ``exp`` decides when it expires."""
    if not body.get("id_token"):
        raise KlutchError(
            "the issuer returned no ID token", "add 'openid' to --scopes and log in again"
        )
    claims = unverified_claims(body["id_token"])
    issued = time.time() if now is None else now
    expires_at = float(claims.get("exp") or issued + float(body.get("expires_in", 0)))
    return Tokens(
        issuer=issuer,
        client_id=client_id,
        id_token=body["id_token"],
        # RFC 6749 §6: the issuer may keep the old refresh token valid and send no new one
        refresh_token=body.get("refresh_token") or previous_refresh_token,
        expires_at=expires_at,
        ca=ca,
    )


def refresh(http: httpx.Client, tokens: Tokens) -> Tokens:
    login_again = LOGIN_AGAIN.format(issuer=tokens.issuer, client_id=tokens.client_id)
    if not tokens.refresh_token:
        raise KlutchError(
            "the ID token expired and there is no refresh token",
            f"{login_again} (with 'offline_access' in --scopes)",
        )
    provider = discover(http, tokens.issuer)
    response = _post(
        http,
        provider.token_endpoint,
        {
            "grant_type": "refresh_token",
            "refresh_token": tokens.refresh_token,
            "client_id": tokens.client_id,
        },
    )
    body = _json(response)
    if response.status_code != 200:
        raise KlutchError(
            f"the issuer refused to refresh the ID token: {_describe(body, response)}", login_again
        )
    return tokens_from_response(
        tokens.issuer, tokens.client_id, tokens.ca, body, tokens.refresh_token
    )


def revoke(http: httpx.Client, provider: Provider, tokens: Tokens) -> bool:
    """Revoke the refresh token at the issuer (RFC 7009 §2.1, as a public client).

    False when the issuer offers no revocation endpoint; a refusal or an unreachable issuer is a
    KlutchError, so the caller keeps the tokens for another try.
    """
    if not provider.revocation_endpoint or not tokens.refresh_token:
        return False
    response = _post(
        http,
        provider.revocation_endpoint,
        {
            "token": tokens.refresh_token,
            "token_type_hint": "refresh_token",
            "client_id": tokens.client_id,
        },
    )
    # §2.2: 200 also for a token that was already invalid; §2.2.1 503 means "try again later".
    if response.status_code != 200:
        raise KlutchError(
            f"{provider.revocation_endpoint} did not revoke the refresh token: "
            f"{_describe(_json(response), response)}; the tokens are kept",
            "run 'klutch-bind logout' again later, or delete "
            f"{cache_path(tokens.issuer, tokens.client_id)} to only forget them here",
        )
    return True


def cache_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "klutch-gitops" / "tokens"


def cache_path(issuer: str, client_id: str) -> Path:
    key = hashlib.sha256(f"{issuer}{client_id}".encode()).hexdigest()[:16]
    return cache_dir() / f"{key}.json"


def save(tokens: Tokens) -> Path:
    """Write atomically and owner-only: the file is created 0600 before any token is written."""
    directory = cache_dir()
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    directory.chmod(0o700)  # mkdir's mode is masked by the umask and ignored if it exists
    path = cache_path(tokens.issuer, tokens.client_id)
    temp = directory / f".{path.name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as file:
            json.dump(asdict(tokens), file, indent=2)
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path


def cached(issuer: str, client_id: str | None = None) -> list[Tokens]:
    """The cache entries of ``issuer`` (and ``client_id``, when given)."""
    if client_id:
        paths = [cache_path(issuer, client_id)]
    else:
        paths = sorted(cache_dir().glob("*.json")) if cache_dir().is_dir() else []
    entries = []
    for path in paths:
        try:
            tokens = Tokens(**json.loads(path.read_text()))
        except FileNotFoundError:
            continue
        except (ValueError, TypeError) as error:
            raise KlutchError(
                f"{path}: not a klutch-bind token cache ({error})",
                f"delete {path} and log in again",
            ) from None
        if tokens.issuer == issuer:
            entries.append(tokens)
    return entries


def remove(issuer: str) -> int:
    """Delete every cache entry of ``issuer``; returns how many there were."""
    entries = cached(issuer)
    for tokens in entries:
        cache_path(tokens.issuer, tokens.client_id).unlink(missing_ok=True)
    return len(entries)


def fresh_id_token(issuer: str, client_id: str | None = None, min_valid: float = 60) -> str:
    """The cached ID token, refreshed first if it expires within ``min_valid`` seconds."""
    entries = cached(issuer, client_id)
    if not entries:
        raise KlutchError(
            f"not logged in to {issuer}" + (f" as client {client_id}" if client_id else ""),
            f"run 'klutch-bind login --issuer {issuer} --client-id <client>'",
        )
    if len(entries) > 1:
        clients = ", ".join(sorted(t.client_id for t in entries))
        raise KlutchError(
            f"logged in to {issuer} with several clients: {clients}", "pass --client-id"
        )
    tokens = entries[0]
    if tokens.expires_within(min_valid):
        with http_client(tokens.ca) as http:
            tokens = refresh(http, tokens)
        save(tokens)
    return tokens.id_token


def _post(http: httpx.Client, url: str, data: dict[str, str]) -> httpx.Response:
    try:
        return http.post(url, data=data)
    except httpx.TransportError as error:
        raise KlutchError(
            f"cannot reach {url}: {error}",
            "check the network, --issuer and, for a private CA, --ca",
        ) from None


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _describe(body: dict[str, Any], response: httpx.Response) -> str:
    """The OAuth error and its description, or the HTTP status: never the response's tokens."""
    if "error" in body:
        return ": ".join(str(body[k]) for k in ("error", "error_description") if body.get(k))
    return f"HTTP {response.status_code}"
