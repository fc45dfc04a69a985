"""Dex is a real OIDC provider: tokens by password grant and device flow, signed with its JWKS."""

from __future__ import annotations

import re
import ssl
import time
from html import unescape
from urllib.parse import urljoin

import httpx
import pytest
from joserfc import jwt
from joserfc.errors import BadSignatureError, InvalidClaimError
from joserfc.jwk import KeySet, RSAKey

from klutch_gitops.localstack.stack import StackInfo

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@pytest.fixture(scope="module")
def oidc(stack: StackInfo) -> httpx.Client:
    with httpx.Client(verify=ssl.create_default_context(cafile=stack.dex.ca), timeout=10.0) as http:
        yield http


@pytest.fixture(scope="module")
def discovery(oidc: httpx.Client, stack: StackInfo) -> dict:
    response = oidc.get(f"{stack.dex.issuer}/.well-known/openid-configuration")
    response.raise_for_status()
    return response.json()


@pytest.fixture(scope="module")
def jwks(oidc: httpx.Client, discovery: dict) -> KeySet:
    return KeySet.import_key_set(oidc.get(discovery["jwks_uri"]).json())


def password_grant(
    oidc: httpx.Client, discovery: dict, stack: StackInfo, password: str
) -> httpx.Response:
    return oidc.post(
        discovery["token_endpoint"],
        data={
            "grant_type": "password",
            "username": stack.dex.email,
            "password": password,
            "scope": "openid email profile groups offline_access",
        },
        auth=(stack.dex.automation_client_id, stack.dex.automation_client_secret),
    )


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

    # The person: open the verification URL, submit the user code, log in with the password.
    with httpx.Client(
        verify=ssl.create_default_context(cafile=stack.dex.ca), timeout=10.0, follow_redirects=True
    ) as browser:
        page = browser.get(device["verification_uri_complete"])
        while "password" not in page.text.lower() or "<form" not in page.text:
            form_action, fields = _form(page)
            page = browser.post(form_action, data=fields)
        form_action, fields = _form(page)
        fields.update(login=stack.dex.email, password=stack.dex.password)
        done = browser.post(form_action, data=fields)
        assert done.status_code == 200, done.text

    tokens = oidc.post(discovery["token_endpoint"], data=poll)
    assert tokens.status_code == 200, tokens.text
    claims = verify(tokens.json()["id_token"], jwks, stack, stack.dex.cli_client_id)
    assert claims["email"] == stack.dex.email
    assert sorted(claims["groups"]) == sorted(stack.dex.groups)


def _form(page: httpx.Response) -> tuple[str, dict[str, str]]:
    """The first form of an HTML page: its absolute action URL and its hidden/preset inputs."""
    form = re.search(r"<form[^>]*>(.*?)</form>", page.text, re.S | re.I)
    assert form, f"no form on {page.url}:\n{page.text[:2000]}"
    action = re.search(r'action="([^"]*)"', form.group(0))
    fields = {
        name: unescape(value)
        for name, value in re.findall(
            r'<input[^>]*name="([^"]+)"[^>]*value="([^"]*)"', form.group(1)
        )
    }
    return urljoin(str(page.url), unescape(action.group(1)) if action else ""), fields
