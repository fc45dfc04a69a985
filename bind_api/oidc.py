"""Verification of OIDC ID tokens against the issuer's discovery document and JWKS.

Every refusal is a :class:`TokenError` whose message names the claim or header and what was
expected, so a person can tell a wrong audience from an expired token without seeing the token.
Only asymmetric algorithms are ever accepted: with HS256 an attacker could use the issuer's public
key as the HMAC secret. The JWKS is cached and refetched when an unknown ``kid`` shows up (key
rotation), at most once per :data:`REFETCH_INTERVAL` so random kids cannot flood the issuer.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any

import httpx
from joserfc import jws
from joserfc.errors import BadSignatureError, JoseError, KeyParameterError
from joserfc.jwk import Key, import_key

log = logging.getLogger(__name__)

DEFAULT_ALGORITHMS = ("RS256", "RS384", "RS512", "ES256", "ES384", "PS256")
ASYMMETRIC_KEY_TYPES = frozenset({"RSA", "EC", "OKP"})
REFETCH_INTERVAL = 10.0
HTTP_TIMEOUT = 10.0
_BASE64URL = re.compile(r"^[A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Principal:
    """Who a verified token says the caller is."""

    subject: str
    issuer: str
    email: str | None
    groups: tuple[str, ...]
    claims: Mapping[str, Any]


class TokenError(Exception):
    """A token was refused (HTTP 401); ``message`` says why and never contains the token."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class IssuerUnavailable(TokenError):
    """The issuer's discovery document or JWKS could not be fetched (HTTP 503)."""


@dataclass(frozen=True)
class _Header:
    alg: str
    kid: str | None


class OIDCVerifier:
    """Verifies ID tokens of one issuer for a set of audiences; safe to share between threads."""

    def __init__(
        self,
        issuer: str,
        audiences: Sequence[str],
        *,
        ca: str | Path | None = None,
        algorithms: Sequence[str] = DEFAULT_ALGORITHMS,
        leeway: float = 30.0,
        jwks_ttl: float = 300.0,
        http: httpx.Client | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``ca`` verifies the issuer's TLS certificate; it is ignored when ``http`` is given."""
        if not audiences:
            raise ValueError("at least one audience is required")
        _check_algorithms(algorithms)
        self.issuer = issuer
        self.audiences = tuple(audiences)
        self.algorithms = tuple(algorithms)
        self.leeway = leeway
        self.jwks_ttl = jwks_ttl
        self._http = http or httpx.Client(verify=_tls(ca), timeout=HTTP_TIMEOUT)
        self._clock = clock
        self._registry = jws.JWSRegistry(algorithms=self.algorithms, strict_check_header=False)
        self._lock = threading.Lock()
        self._jwks_uri: str | None = None
        self._keys: dict[str | None, Key] = {}
        self._fetched_at: float | None = None
        self._attempted_at = 0.0
        self._unavailable: str | None = None  # why the last refetch failed

    def verify(self, token: str) -> Principal:
        """The principal of a valid token; :class:`TokenError` saying why otherwise."""
        header = self._header(token)
        key = self._key(header)
        try:
            signed = jws.deserialize_compact(token, key, registry=self._registry)
        except BadSignatureError:
            raise TokenError(
                f"token signature does not verify with key {header.kid!r} of {self.issuer}"
            ) from None
        except KeyParameterError as error:
            raise TokenError(
                f"key {header.kid!r} of {self.issuer} cannot verify {header.alg}: {error}"
            ) from None
        except JoseError as error:
            raise TokenError(f"token is malformed: {error}") from None
        return self._principal(_json_object(signed.payload, "payload"))

    def _header(self, token: str) -> _Header:
        parts = token.split(".")
        valid = len(parts) == 3 and parts[0] and parts[1]
        if not valid or not all(_BASE64URL.match(part) for part in parts):
            raise TokenError("token is malformed: expected three base64url parts separated by '.'")
        header = _json_object(_b64decode(parts[0]), "header")
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in self.algorithms:
            raise TokenError(
                f"token algorithm {alg!r} is not allowed (allowed: {', '.join(self.algorithms)})"
            )
        if kid is not None and not isinstance(kid, str):
            raise TokenError(f"token header kid must be a string, not {type(kid).__name__}")
        return _Header(alg, kid)

    def _key(self, header: _Header) -> Key:
        keys = self._current_keys(header.kid)
        if header.kid is None:
            if len(keys) != 1:
                raise TokenError(
                    f"token header has no kid and {self.issuer} publishes {len(keys)} signing keys"
                )
            return next(iter(keys.values()))
        if header.kid not in keys:
            raise TokenError(
                f"token key id {header.kid!r} is not among the signing keys of {self.issuer}"
            )
        return keys[header.kid]

    def _current_keys(self, kid: str | None) -> dict[str | None, Key]:
        """The cached keys, refetched when stale or when ``kid`` is new, rate limited.

        Until the first fetch succeeds every call retries it; afterwards a failed refetch keeps
        the cached keys, so a short issuer outage does not refuse tokens signed by known keys.
        A token naming a key that only the unreachable issuer could show (it rotated its keys,
        say on a restart) may well be valid: that is IssuerUnavailable (503), not a refusal.
        """
        with self._lock:
            now = self._clock()
            if self._fetched_at is None:
                self._refresh(now)
            elif now >= self._attempted_at + REFETCH_INTERVAL and (
                now >= self._fetched_at + self.jwks_ttl or kid not in self._keys
            ):
                try:
                    self._refresh(now)
                except IssuerUnavailable as error:
                    self._unavailable = error.message
                    log.warning("keeping the cached signing keys: %s", error.message)
            if kid is not None and kid not in self._keys and self._unavailable is not None:
                raise IssuerUnavailable(self._unavailable)
            return self._keys

    def _refresh(self, now: float) -> None:
        self._attempted_at = now
        self._keys = self._fetch_keys()
        self._fetched_at = now
        self._unavailable = None

    def _fetch_keys(self) -> dict[str | None, Key]:
        if self._jwks_uri is None:
            self._jwks_uri = self._discover()
        jwks = self._get_json(self._jwks_uri, "JWKS")
        if not isinstance(jwks.get("keys"), list):
            raise IssuerUnavailable(f"JWKS of {self.issuer} at {self._jwks_uri} has no keys list")
        keys: dict[str | None, Key] = {}
        for data in jwks["keys"]:
            key = _signing_key(data)
            if key is not None:
                keys[key.kid] = key
        return keys

    def _discover(self) -> str:
        url = f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
        document = self._get_json(url, "discovery document")
        if document.get("issuer") != self.issuer:
            raise IssuerUnavailable(
                f"discovery document at {url} names issuer {document.get('issuer')!r}, "
                f"expected {self.issuer}"
            )
        jwks_uri = document.get("jwks_uri")
        if not isinstance(jwks_uri, str):
            raise IssuerUnavailable(f"discovery document at {url} has no jwks_uri")
        return jwks_uri

    def _get_json(self, url: str, what: str) -> dict[str, Any]:
        try:
            response = self._http.get(url)
            response.raise_for_status()
            body = response.json()
        except (httpx.HTTPError, ValueError) as error:
            raise IssuerUnavailable(
                f"cannot fetch the {what} of {self.issuer} at {url}: {error}"
            ) from error
        if not isinstance(body, dict):
            raise IssuerUnavailable(f"the {what} of {self.issuer} at {url} is not a JSON object")
        return body

    def _principal(self, claims: dict[str, Any]) -> Principal:
        if claims.get("iss") != self.issuer:
            raise TokenError(f"token issuer {claims.get('iss')!r} is not {self.issuer}")
        self._check_audience(claims)
        self._check_times(claims)
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise TokenError("token has no sub claim")
        groups = claims.get("groups", [])
        if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
            raise TokenError("token groups claim must be a list of strings")
        email = claims.get("email")
        return Principal(
            subject=subject,
            issuer=self.issuer,
            email=email if isinstance(email, str) else None,
            groups=tuple(groups),
            claims=MappingProxyType(claims),
        )

    def _check_audience(self, claims: dict[str, Any]) -> None:
        aud = claims.get("aud")
        audiences = [aud] if isinstance(aud, str) else aud
        if not isinstance(audiences, list) or not all(isinstance(a, str) for a in audiences):
            raise TokenError(f"token audience must be a string or a list of strings, not {aud!r}")
        ours = ", ".join(self.audiences)
        if not set(audiences) & set(self.audiences):
            raise TokenError(f"token audience {audiences} does not include {ours}")
        azp = claims.get("azp")
        if len(audiences) > 1 and azp is not None and azp not in self.audiences:
            raise TokenError(f"token authorized party (azp) {azp!r} is not {ours}")

    def _check_times(self, claims: dict[str, Any]) -> None:
        now = self._clock()
        exp = _time_claim(claims, "exp")
        if exp is None:
            raise TokenError("token has no exp claim")
        if now > exp + self.leeway:
            raise TokenError(
                f"token expired at {_iso(exp)} (now {_iso(now)}, leeway {self.leeway:g}s)"
            )
        for name, meaning in (("nbf", "not valid before"), ("iat", "issued at")):
            value = _time_claim(claims, name)
            if value is not None and value > now + self.leeway:
                raise TokenError(
                    f"token {name} claim is in the future: {meaning} {_iso(value)} "
                    f"(now {_iso(now)}, leeway {self.leeway:g}s)"
                )


def _check_algorithms(algorithms: Sequence[str]) -> None:
    """Refuse configuring ``none``, HMAC or unknown algorithms: only public-key signatures."""
    for name in algorithms:
        model = jws.JWSRegistry.algorithms.get(name)
        if model is None or model.key_type not in ASYMMETRIC_KEY_TYPES:
            raise ValueError(f"algorithm {name!r} is not an asymmetric JWS algorithm")


def _tls(ca: str | Path | None) -> ssl.SSLContext | bool:
    return ssl.create_default_context(cafile=str(ca)) if ca else True


def _signing_key(data: Any) -> Key | None:
    """A public signing key from a JWKS entry; encryption and symmetric keys are ignored."""
    if not isinstance(data, dict) or data.get("use", "sig") != "sig":
        return None
    if data.get("kty") not in ASYMMETRIC_KEY_TYPES:
        return None
    try:
        return import_key(data)
    except (JoseError, ValueError) as error:
        log.warning("ignoring JWKS key %r: %s", data.get("kid"), error)
        return None


def _b64decode(part: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    except (binascii.Error, ValueError):
        raise TokenError("token is malformed: a part is not valid base64url") from None


def _json_object(raw: bytes, part: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        raise TokenError(f"token is malformed: the {part} is not JSON") from None
    if not isinstance(value, dict):
        raise TokenError(f"token is malformed: the {part} is not a JSON object")
    return value


def _time_claim(claims: Mapping[str, Any], name: str) -> float | None:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenError(f"token {name} claim must be a number of seconds, not {value!r}")
    return float(value)


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds")
