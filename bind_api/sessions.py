"""Tamper-proof, short-lived browser state without server-side storage.

The browser flow keeps what it must remember between requests (PKCE verifier, nonce, the CLI's
callback, later the verified identity) in cookies encrypted and authenticated with one key
(JWE ``dir`` + ``A256GCM``), and signs the OAuth ``state`` it sends through the issuer (JWS
``HS256``). Every token names its purpose, so one kind can never stand in for another, and
expires. Being stateless, any replica that shares the key can continue a login.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Callable
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from joserfc import jwe, jws, jwt
from joserfc.errors import JoseError
from joserfc.jwk import OctKey

SEALED = ("dir", "A256GCM")
SIGNED = ("HS256",)
MIN_KEY_BYTES = 32


class SessionError(Exception):
    """A token that is missing, forged, for another purpose, or expired; says which."""


class SessionCodec:
    def __init__(self, key: bytes, clock: Callable[[], float] = time.time) -> None:
        if len(key) < MIN_KEY_BYTES:
            raise ValueError(f"the session key needs at least {MIN_KEY_BYTES} bytes")
        self._sealing = OctKey.import_key(_derive(key, b"klutch-bind cookies"))
        self._signing = OctKey.import_key(_derive(key, b"klutch-bind state"))
        self._clock = clock

    def seal(self, purpose: str, claims: dict[str, Any], ttl: float) -> str:
        """Encrypt ``claims`` for ``purpose``, valid for ``ttl`` seconds."""
        return jwt.encode(
            {"alg": SEALED[0], "enc": SEALED[1]},
            self._stamp(purpose, claims, ttl),
            self._sealing,
            algorithms=SEALED,
            registry=jwe.JWERegistry(algorithms=list(SEALED)),
        )

    def open(self, purpose: str, token: str | None) -> dict[str, Any]:
        return self._check(purpose, token, self._sealing, SEALED, jwe.JWERegistry)

    def sign(self, purpose: str, claims: dict[str, Any], ttl: float) -> str:
        """Sign ``claims`` for ``purpose``: readable by anyone, changeable by no one."""
        return jwt.encode(
            {"alg": SIGNED[0]}, self._stamp(purpose, claims, ttl), self._signing, SIGNED
        )

    def verify(self, purpose: str, token: str | None) -> dict[str, Any]:
        return self._check(purpose, token, self._signing, SIGNED, jws.JWSRegistry)

    def _stamp(self, purpose: str, claims: dict[str, Any], ttl: float) -> dict[str, Any]:
        now = int(self._clock())
        return {**claims, "purpose": purpose, "iat": now, "exp": now + int(ttl)}

    def _check(
        self,
        purpose: str,
        token: str | None,
        key: OctKey,
        algorithms: tuple[str, ...],
        registry: type[jwe.JWERegistry] | type[jws.JWSRegistry],
    ) -> dict[str, Any]:
        if not token:
            raise SessionError(f"no {purpose}")
        try:
            claims = jwt.decode(
                token, key, algorithms, registry=registry(algorithms=list(algorithms))
            ).claims
        except (JoseError, ValueError):
            raise SessionError(f"the {purpose} is not one this bind API issued") from None
        if claims.get("purpose") != purpose:
            raise SessionError(f"the {purpose} is a token for something else")
        if not isinstance(claims.get("exp"), int) or claims["exp"] < self._clock():
            raise SessionError(f"the {purpose} has expired")
        return claims


def fingerprint(value: str) -> str:
    """What the signed ``state`` carries of the session cookie: a hash, never the value."""
    return hashlib.sha256(value.encode()).hexdigest()


def same(a: str, b: str) -> bool:
    return secrets.compare_digest(a.encode(), b.encode())


def _derive(key: bytes, purpose: bytes) -> bytes:
    """Separate keys for encryption and signing, both from the one configured secret."""
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=purpose).derive(key)
