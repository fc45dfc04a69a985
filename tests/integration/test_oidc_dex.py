"""OIDCVerifier against real Dex tokens: discovery and JWKS over Dex's https, its real keys."""

from __future__ import annotations

import base64
import json

import httpx
import pytest

from bind_api.oidc import OIDCVerifier, TokenError
from klutch_gitops.dev.localstack.stack import StackInfo

from .dexflows import log_in_in_a_browser, password_grant

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@pytest.fixture(scope="module")
def id_token(oidc: httpx.Client, discovery: dict, stack: StackInfo) -> str:
    """An ID token for the automation client, by password grant."""
    response = password_grant(oidc, discovery, stack)
    assert response.status_code == 200, response.text
    return response.json()["id_token"]


def verifier(stack: StackInfo, audience: str) -> OIDCVerifier:
    return OIDCVerifier(stack.dex.issuer, [audience], ca=stack.dex.ca)


def test_a_password_grant_token_verifies(id_token: str, stack: StackInfo) -> None:
    principal = verifier(stack, stack.dex.automation_client_id).verify(id_token)
    assert principal.issuer == stack.dex.issuer
    assert principal.email == stack.dex.email
    assert sorted(principal.groups) == sorted(stack.dex.groups)
    assert principal.subject
    assert principal.subject == principal.claims["sub"]


def test_a_token_for_another_client_is_refused(id_token: str, stack: StackInfo) -> None:
    with pytest.raises(TokenError) as caught:
        verifier(stack, stack.dex.cli_client_id).verify(id_token)
    assert caught.value.message == (
        f"token audience ['{stack.dex.automation_client_id}'] does not include "
        f"{stack.dex.cli_client_id}"
    )


def test_an_altered_payload_is_refused(id_token: str, stack: StackInfo) -> None:
    header, payload, signature = id_token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"] = [*claims.get("groups", []), "cluster-admins"]
    forged_payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(TokenError) as caught:
        verifier(stack, stack.dex.automation_client_id).verify(
            f"{header}.{forged_payload}.{signature}"
        )
    assert caught.value.message.startswith("token signature does not verify with key")


def test_a_device_flow_token_for_the_cli_verifies(
    oidc: httpx.Client, discovery: dict, stack: StackInfo
) -> None:
    assert stack.dex.cli_client_id == "klutch-bind"
    start = oidc.post(
        discovery["device_authorization_endpoint"],
        data={"client_id": stack.dex.cli_client_id, "scope": "openid email groups"},
    )
    assert start.status_code == 200, start.text
    device = start.json()
    log_in_in_a_browser(device["verification_uri_complete"], stack)
    tokens = oidc.post(
        discovery["token_endpoint"],
        data={
            "grant_type": DEVICE_GRANT,
            "device_code": device["device_code"],
            "client_id": stack.dex.cli_client_id,
        },
    )
    assert tokens.status_code == 200, tokens.text

    principal = verifier(stack, "klutch-bind").verify(tokens.json()["id_token"])
    assert principal.email == stack.dex.email
    assert sorted(principal.groups) == sorted(stack.dex.groups)
