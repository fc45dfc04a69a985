"""The tokens of ``klutch-bind login``: taken from a token response, refreshed, revoked at the
issuer, and cached per issuer and client, readable by the owner only."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx

from klutch_gitops.errors import KlutchError
from klutch_gitops.oidc_client import (
    Provider,
    describe_error,
    discover,
    http_client,
    json_body,
    post_form,
    unverified_claims,
)

LOGIN_AGAIN = "run 'klutch-bind login --issuer {issuer} --client-id {client_id}' again"


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
    response = post_form(
        http,
        provider.token_endpoint,
        {
            "grant_type": "refresh_token",
            "refresh_token": tokens.refresh_token,
            "client_id": tokens.client_id,
        },
    )
    body = json_body(response)
    if response.status_code != 200:
        raise KlutchError(
            f"the issuer refused to refresh the ID token: {describe_error(body, response)}",
            login_again,
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
    response = post_form(
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
            f"{describe_error(json_body(response), response)}; the tokens are kept",
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


def ready_dir() -> Path:
    """The cache directory, made owner-only; checked before a login, so no login is lost."""
    directory = cache_dir()
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        directory.chmod(0o700)  # mkdir's mode is masked by the umask and ignored if it exists
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(directory))
    except OSError as error:
        raise KlutchError(
            f"cannot write the token cache {directory}: {error.strerror or error}",
            "set XDG_CONFIG_HOME to a writable directory (tokens go to "
            "$XDG_CONFIG_HOME/klutch-gitops/tokens), or make that path writable",
        ) from None
    return directory


def save(tokens: Tokens) -> Path:
    """Write atomically and owner-only: the file is created 0600 before any token is written."""
    directory = ready_dir()
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
