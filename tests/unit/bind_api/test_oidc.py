"""OIDCVerifier against locally minted tokens and a fake issuer served by an httpx MockTransport."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding
from joserfc import jwt
from joserfc.jwk import ECKey, Key, RSAKey

from bind_api.oidc import IssuerUnavailable, OIDCVerifier, Principal, TokenError

ISSUER = "https://dex.example/dex"
AUDIENCE = "klutch-gitops"
NOW = 1_800_000_000.0
RSA = RSAKey.generate_key(2048, parameters={"kid": "rsa-1", "use": "sig"})
EC = ECKey.generate_key("P-256", parameters={"kid": "ec-1"})


class FakeIssuer:
    """Discovery document and JWKS of a fake issuer; counts the JWKS fetches."""

    def __init__(self, *keys: Key) -> None:
        self.jwks: list[dict[str, Any]] = [public(key) for key in keys]
        self.discovered_issuer = ISSUER
        self.jwks_fetches = 0
        self.down = False
        self.lock = threading.Lock()

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/dex/.well-known/openid-configuration":
            return httpx.Response(
                200, json={"issuer": self.discovered_issuer, "jwks_uri": f"{ISSUER}/keys"}
            )
        assert request.url.path == "/dex/keys"
        with self.lock:
            self.jwks_fetches += 1
        return httpx.Response(200, json={"keys": self.jwks})


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def public(key: Key) -> dict[str, Any]:
    return key.as_dict(private=False)


def claims(**overrides: Any) -> dict[str, Any]:
    base = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "CiQwOGE4Njg0Yi1kYjg4",
        "email": "dev@example.com",
        "groups": ["platform", "developers"],
        "iat": int(NOW) - 60,
        "exp": int(NOW) + 600,
    }
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


def mint(key: Key = RSA, alg: str = "RS256", kid: str | None = None, **overrides: Any) -> str:
    """A signed token; ``kid=""`` leaves the kid out of the header."""
    kid = key.kid if kid is None else kid
    header = {"alg": alg, "kid": kid} if kid else {"alg": alg}
    return jwt.encode(header, claims(**overrides), key, [alg])


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.fixture
def issuer() -> FakeIssuer:
    return FakeIssuer(RSA, EC)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def verifier(issuer: FakeIssuer, clock: Clock) -> OIDCVerifier:
    return make_verifier(issuer, clock)


def make_verifier(issuer: FakeIssuer, clock: Clock, **options: Any) -> OIDCVerifier:
    http = httpx.Client(transport=httpx.MockTransport(issuer))
    return OIDCVerifier(ISSUER, [AUDIENCE], http=http, clock=clock, **options)


def refused(verifier: OIDCVerifier, token: str) -> str:
    with pytest.raises(TokenError) as caught:
        verifier.verify(token)
    assert token not in caught.value.message
    return caught.value.message


@pytest.mark.parametrize(("key", "alg"), [(RSA, "RS256"), (RSA, "PS256"), (EC, "ES256")])
def test_a_valid_token_gives_the_principal(verifier: OIDCVerifier, key: Key, alg: str) -> None:
    principal = verifier.verify(mint(key, alg))
    assert principal == Principal(
        subject="CiQwOGE4Njg0Yi1kYjg4",
        issuer=ISSUER,
        email="dev@example.com",
        groups=("platform", "developers"),
        claims=principal.claims,
    )
    assert principal.claims["aud"] == AUDIENCE


def test_groups_default_to_empty_and_must_be_strings(verifier: OIDCVerifier) -> None:
    assert verifier.verify(mint(groups=None, email=None)).groups == ()
    assert verifier.verify(mint(email=None)).email is None
    assert "groups" in refused(verifier, mint(groups="admins"))


@pytest.mark.parametrize(
    ("token", "expected"),
    [
        ("not-a-jwt", "three base64url parts"),
        ("a.b", "three base64url parts"),
        ("a.b.c.d", "three base64url parts"),
        (".e30.c2ln", "three base64url parts"),
        ("a b.c.d", "three base64url parts"),
        (f"{b64(b'not json')}.e30.c2ln", "header is not JSON"),
        (f"{b64(b'[1]')}.e30.c2ln", "header is not a JSON object"),
    ],
)
def test_malformed_tokens_are_refused(verifier: OIDCVerifier, token: str, expected: str) -> None:
    assert expected in refused(verifier, token)


def test_payload_that_is_not_json_is_refused(verifier: OIDCVerifier) -> None:
    header = b64(json.dumps({"alg": "RS256", "kid": RSA.kid}).encode())
    payload = b64(b"not json")
    signature = b64(
        RSA.private_key.sign(f"{header}.{payload}".encode(), padding.PKCS1v15(), hashes.SHA256())
    )
    assert "payload is not JSON" in refused(verifier, f"{header}.{payload}.{signature}")


def test_alg_none_is_refused_without_asking_the_issuer(
    verifier: OIDCVerifier, issuer: FakeIssuer
) -> None:
    header = b64(json.dumps({"alg": "none", "kid": RSA.kid}).encode())
    unsigned = f"{header}.{b64(json.dumps(claims()).encode())}."
    for token in (unsigned, unsigned + b64(b"x")):
        assert refused(verifier, token).startswith("token algorithm 'none' is not allowed")
    assert issuer.jwks_fetches == 0


def test_hs256_signed_with_the_public_key_is_refused(verifier: OIDCVerifier) -> None:
    """The classic confusion attack: the RSA public key as an HMAC secret."""
    header = b64(json.dumps({"alg": "HS256", "kid": RSA.kid}).encode())
    payload = b64(json.dumps(claims()).encode())
    secret = RSA.as_pem(private=False)
    mac = hmac.new(secret, f"{header}.{payload}".encode(), hashlib.sha256).digest()
    message = refused(verifier, f"{header}.{payload}.{b64(mac)}")
    assert message == (
        "token algorithm 'HS256' is not allowed (allowed: RS256, RS384, RS512, ES256, ES384, PS256)"
    )


@pytest.mark.parametrize("alg", ["HS256", "none", "XX999"])
def test_only_asymmetric_algorithms_can_be_configured(alg: str) -> None:
    with pytest.raises(ValueError, match="not an asymmetric JWS algorithm"):
        OIDCVerifier(ISSUER, [AUDIENCE], algorithms=["RS256", alg])


def test_an_empty_signature_is_refused(verifier: OIDCVerifier) -> None:
    header, payload, _ = mint().split(".")
    assert "signature does not verify" in refused(verifier, f"{header}.{payload}.")


def test_a_second_key_with_the_same_kid_gives_a_bad_signature(verifier: OIDCVerifier) -> None:
    impostor = RSAKey.generate_key(2048, parameters={"kid": RSA.kid})
    message = refused(verifier, mint(impostor))
    assert message == f"token signature does not verify with key 'rsa-1' of {ISSUER}"


def test_a_key_of_the_wrong_type_for_the_alg_is_refused(verifier: OIDCVerifier) -> None:
    header = b64(json.dumps({"alg": "ES256", "kid": RSA.kid}).encode())
    token = f"{header}.{b64(json.dumps(claims()).encode())}.{b64(b'x' * 64)}"
    assert refused(verifier, token).startswith(f"key 'rsa-1' of {ISSUER} cannot verify ES256")


def test_an_unknown_kid_is_refused_after_one_refetch(
    verifier: OIDCVerifier, issuer: FakeIssuer, clock: Clock
) -> None:
    verifier.verify(mint())
    clock.now += 11
    stranger = RSAKey.generate_key(2048, parameters={"kid": "stranger"})
    message = refused(verifier, mint(stranger))
    assert message == f"token key id 'stranger' is not among the signing keys of {ISSUER}"
    assert issuer.jwks_fetches == 2


def test_rotation_refetches_once_and_random_kids_are_rate_limited(
    verifier: OIDCVerifier, issuer: FakeIssuer, clock: Clock
) -> None:
    verifier.verify(mint())
    assert issuer.jwks_fetches == 1

    rotated = RSAKey.generate_key(2048, parameters={"kid": "rsa-2"})
    issuer.jwks = [public(rotated)]
    clock.now += 11
    assert verifier.verify(mint(rotated)).subject
    assert issuer.jwks_fetches == 2
    assert "'rsa-1' is not among" in refused(verifier, mint())  # the old key is gone

    for n in range(20):
        clock.now += 0.4
        refused(verifier, mint(rotated, kid=f"random-{n}"))
    assert issuer.jwks_fetches == 2  # 8 s of random kids: within the rate limit
    clock.now += 3
    refused(verifier, mint(rotated, kid="random-late"))
    assert issuer.jwks_fetches == 3


def test_the_jwks_is_refetched_after_its_ttl(issuer: FakeIssuer, clock: Clock) -> None:
    verifier = make_verifier(issuer, clock, jwks_ttl=60)
    verifier.verify(mint())
    clock.now += 59
    verifier.verify(mint())
    assert issuer.jwks_fetches == 1
    clock.now += 2
    verifier.verify(mint(exp=int(clock.now) + 60))
    assert issuer.jwks_fetches == 2


def test_keys_not_for_signing_are_ignored(issuer: FakeIssuer, verifier: OIDCVerifier) -> None:
    encryption = RSAKey.generate_key(2048, parameters={"kid": "enc-1"})
    issuer.jwks.append({**public(encryption), "use": "enc"})
    issuer.jwks.append({"kty": "oct", "kid": "hmac-1", "k": b64(b"secret")})
    assert "'enc-1' is not among" in refused(verifier, mint(encryption))
    header = b64(json.dumps({"alg": "RS256", "kid": "hmac-1"}).encode())
    token = f"{header}.{b64(json.dumps(claims()).encode())}.{b64(b'x')}"
    assert "'hmac-1' is not among" in refused(verifier, token)


def test_a_token_without_kid_needs_a_single_signing_key(clock: Clock) -> None:
    assert make_verifier(FakeIssuer(RSA), clock).verify(mint(kid="")).subject
    message = refused(make_verifier(FakeIssuer(RSA, EC), clock), mint(kid=""))
    assert message == f"token header has no kid and {ISSUER} publishes 2 signing keys"


def test_a_wrong_issuer_is_refused(verifier: OIDCVerifier) -> None:
    message = refused(verifier, mint(iss="https://evil.example"))
    assert message == f"token issuer 'https://evil.example' is not {ISSUER}"


def test_a_wrong_audience_is_refused(verifier: OIDCVerifier) -> None:
    assert refused(verifier, mint(aud="x")) == "token audience ['x'] does not include klutch-gitops"
    assert "does not include" in refused(verifier, mint(aud=["x", "y"]))
    assert "audience must be" in refused(verifier, mint(aud=None))


def test_audience_lists_and_azp(verifier: OIDCVerifier) -> None:
    assert verifier.verify(mint(aud=["other", AUDIENCE])).subject
    assert verifier.verify(mint(aud=["other", AUDIENCE], azp=AUDIENCE)).subject
    assert verifier.verify(mint(aud=AUDIENCE, azp="cli")).subject  # one audience: azp is moot
    message = refused(verifier, mint(aud=["other", AUDIENCE], azp="other"))
    assert message == "token authorized party (azp) 'other' is not klutch-gitops"


def test_any_configured_audience_is_accepted(issuer: FakeIssuer, clock: Clock) -> None:
    http = httpx.Client(transport=httpx.MockTransport(issuer))
    verifier = OIDCVerifier(ISSUER, ["a", "b"], http=http, clock=clock)
    assert verifier.verify(mint(aud="b")).subject
    assert refused(verifier, mint(aud="c")) == "token audience ['c'] does not include a, b"


def test_expiry_with_and_without_leeway(issuer: FakeIssuer, clock: Clock) -> None:
    token = mint(exp=int(NOW) - 20)
    assert make_verifier(issuer, clock).verify(token).subject  # 20 s late, 30 s leeway
    message = refused(make_verifier(issuer, clock, leeway=0), token)
    assert message.startswith("token expired at 2027-01-15T07:59:40+00:00 (now 2027-01-15T08:00")
    assert "token expired" in refused(make_verifier(issuer, clock), mint(exp=int(NOW) - 31))
    assert refused(make_verifier(issuer, clock), mint(exp=None)) == "token has no exp claim"
    assert "exp claim must be a number" in refused(make_verifier(issuer, clock), mint(exp="soon"))


@pytest.mark.parametrize("claim", ["nbf", "iat"])
def test_not_before_and_issued_at_in_the_future(
    issuer: FakeIssuer, clock: Clock, claim: str
) -> None:
    token = mint(**{claim: int(NOW) + 20})
    assert make_verifier(issuer, clock).verify(token).subject
    message = refused(make_verifier(issuer, clock, leeway=0), token)
    assert message.startswith(f"token {claim} claim is in the future")
    assert "in the future" in refused(make_verifier(issuer, clock), mint(**{claim: NOW + 31}))


def test_a_missing_subject_is_refused(verifier: OIDCVerifier) -> None:
    assert refused(verifier, mint(sub=None)) == "token has no sub claim"


def test_an_unreachable_issuer_is_unavailable_and_retried(
    verifier: OIDCVerifier, issuer: FakeIssuer
) -> None:
    issuer.down = True
    with pytest.raises(IssuerUnavailable) as caught:
        verifier.verify(mint())
    assert ISSUER in caught.value.message
    issuer.down = False
    assert verifier.verify(mint()).subject


def test_cached_keys_survive_a_failed_refetch(
    verifier: OIDCVerifier, issuer: FakeIssuer, clock: Clock
) -> None:
    verifier.verify(mint())
    issuer.down = True
    clock.now += 301
    assert verifier.verify(mint(exp=int(clock.now) + 60)).subject


def test_a_discovery_document_for_another_issuer_is_refused(
    verifier: OIDCVerifier, issuer: FakeIssuer
) -> None:
    issuer.discovered_issuer = "https://other.example"
    with pytest.raises(IssuerUnavailable, match=re.escape("names issuer 'https://other.example'")):
        verifier.verify(mint())


def test_concurrent_verification_fetches_once(verifier: OIDCVerifier, issuer: FakeIssuer) -> None:
    tokens = [mint(sub=f"user-{n}") for n in range(32)]
    with ThreadPoolExecutor(8) as pool:
        subjects = list(pool.map(lambda token: verifier.verify(token).subject, tokens))
    assert subjects == [f"user-{n}" for n in range(32)]
    assert issuer.jwks_fetches == 1
