"""Dex is a real OIDC provider: tokens by password grant and device flow, signed with its JWKS."""

from __future__ import annotations

import time

import httpx
import pytest
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidClaimError
from joserfc.jwk import KeySet, RSAKey

from klutch_gitops.dev.localstack.stack import StackInfo

from .dexflows import log_in_in_a_browser, password_grant

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@pytest.fixture(scope="module")
def jwks(oidc: httpx.Client, discovery: dict) -> KeySet:
    return KeySet.import_key_set(oidc.get(discovery["jwks_uri"]).json())


def verify(token: str, jwks: KeySet, stack: StackInfo, audience: str) -> dict:
    decoded = jwt.decode(token, jwks, algorithms=["RS256", "ES256"])
    jwt.JWTClaimsRegistry(
        iss={"essential": True, "value": stack.dex.issuer},
        aud={"essential": True, "value": audience},
        exp={"essential": True},
        sub={"essential": True},
    ).validate(decoded.claims)
    return decoded.claims


def test_discovery_names_the_https_issuer(discovery: dict, stack: StackInfo) -> None:
    assert discovery["issuer"] == stack.dex.issuer
    assert stack.dex.issuer.startswith("https://127.0.0.1:")
    assert {"password", DEVICE_GRANT} <= set(discovery["grant_types_supported"])


def test_password_grant_gives_a_signed_id_token_with_groups(
    oidc, discovery, jwks, stack: StackInfo
) -> None:
    response = password_grant(oidc, discovery, stack, stack.dex.password)
    assert response.status_code == 200, response.text
    claims = verify(response.json()["id_token"], jwks, stack, stack.dex.automation_client_id)
    assert claims["email"] == stack.dex.email
    assert sorted(claims["groups"]) == sorted(stack.dex.groups)
    assert claims["exp"] > time.time()
    assert "refresh_token" in response.json()


def test_tampered_or_foreign_tokens_fail_verification(
    oidc, discovery, jwks, stack: StackInfo
) -> None:
    token = password_grant(oidc, discovery, stack, stack.dex.password).json()["id_token"]
    header, payload, signature = token.split(".")
    forged = (
        f"{header}.{payload}.{signature[:-6]}{'A' * 6 if signature[-6:] != 'A' * 6 else 'B' * 6}"
    )
    with pytest.raises(BadSignatureError):
        jwt.decode(forged, jwks, algorithms=["RS256"])

    foreign_key = RSAKey.generate_key(2048, parameters={"kid": jwks.keys[0].kid})
    foreign = jwt.encode(
        {"alg": "RS256", "kid": foreign_key.kid}, jwt.decode(token, jwks).claims, foreign_key
    )
    with pytest.raises(BadSignatureError):
        jwt.decode(foreign, jwks, algorithms=["RS256"])

    with pytest.raises(InvalidClaimError):
        verify(token, jwks, stack, audience="someone-else")


def test_wrong_password_is_refused(oidc, discovery, stack: StackInfo) -> None:
    response = password_grant(oidc, discovery, stack, "not-the-password")
    assert response.status_code in (400, 401)
    assert "id_token" not in response.text


def test_device_flow_for_the_public_cli_client(oidc, discovery, jwks, stack: StackInfo) -> None:
    """The CLI's flow end to end: device code, a person logs in in a browser, the CLI polls."""
    start = oidc.post(
        discovery["device_authorization_endpoint"],
        data={"client_id": stack.dex.cli_client_id, "scope": "openid email groups"},
    )
    assert start.status_code == 200, start.text
    device = start.json()
    poll = {
        "grant_type": DEVICE_GRANT,
        "device_code": device["device_code"],
        "client_id": stack.dex.cli_client_id,
    }
    pending = oidc.post(discovery["token_endpoint"], data=poll)
    assert pending.json()["error"] == "authorization_pending"

    log_in_in_a_browser(device["verification_uri_complete"], stack)  # the person

    tokens = oidc.post(discovery["token_endpoint"], data=poll)
    assert tokens.status_code == 200, tokens.text
    claims = verify(tokens.json()["id_token"], jwks, stack, stack.dex.cli_client_id)
    assert claims["email"] == stack.dex.email
    assert sorted(claims["groups"]) == sorted(stack.dex.groups)
