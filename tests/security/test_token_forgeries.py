"""Forged and foreign ID tokens against the real bind API, which verifies them with the real Dex.

The forgeries are the classic ones for JWT verifiers (RFC 8725, "JSON Web Token Best Current
Practices", sections 2.1 and 3.1): ``alg: none``; HS256 keyed with the issuer's public key, which
a verifier that lets the token pick the algorithm would accept; a genuine token with a changed
payload; a token signed by the attacker's own key under the issuer's key id, or under a key id of
its own; a genuine Dex token issued to another client. Each must be a 401 naming the problem on the
endpoint that binds, with nothing bound.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import ssl
import uuid
from collections.abc import Iterator

import httpx
import pytest
from joserfc import jwt
from joserfc.jwk import RSAKey
from kubernetes import client

from bind_api.server import build_server
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import NAMESPACES
from tests.integration.bindapi import API, bind_api_config, dev_id_token, offered_api, serving


@pytest.fixture(scope="module")
def bind_api(stack: StackInfo, clusters: dict[str, client.ApiClient]) -> Iterator[str]:
    with offered_api(clusters, "a-secjwt"), serving(build_server(bind_api_config(stack))) as url:
        yield url


@pytest.fixture(scope="module")
def genuine(stack: StackInfo) -> str:
    return dev_id_token(stack)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _parts(token: str) -> tuple[dict, dict]:
    header, payload, _ = token.split(".")
    decode = lambda part: json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))  # noqa: E731
    return decode(header), decode(payload)


def _hs256(header: dict, claims: dict, secret: bytes) -> str:
    """Signed by hand: joserfc (rightly) refuses a public key as an HMAC secret."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


def _issuer_jwks(stack: StackInfo) -> dict:
    with httpx.Client(verify=ssl.create_default_context(cafile=stack.dex.ca), timeout=10) as http:
        discovery = http.get(f"{stack.dex.issuer}/.well-known/openid-configuration").json()
        return http.get(discovery["jwks_uri"]).json()


def forgeries(stack: StackInfo, token: str) -> dict[str, tuple[str, str]]:
    """Each forgery and the start of the message that must refuse it."""
    header, claims = _parts(token)
    kid = header["kid"]
    escalated = {**claims, "groups": [*claims.get("groups", []), "cluster-admins"]}
    genuine_header, _, genuine_signature = token.split(".")
    public = next(k for k in _issuer_jwks(stack)["keys"] if k["kid"] == kid)
    public_pem = RSAKey.import_key(public).as_pem(private=False)
    own_key = RSAKey.generate_key(2048, parameters={"kid": kid})
    other_kid = RSAKey.generate_key(2048, parameters={"kid": "attacker-key"})
    return {
        "alg-none": (
            f"{_b64(json.dumps({'alg': 'none', 'kid': kid}).encode())}."
            f"{_b64(json.dumps(escalated).encode())}.",
            "token algorithm 'none' is not allowed",
        ),
        "hs256-with-the-public-key": (
            _hs256({"alg": "HS256", "kid": kid}, escalated, public_pem),
            "token algorithm 'HS256' is not allowed",
        ),
        "changed-payload": (
            f"{genuine_header}.{_b64(json.dumps(escalated).encode())}.{genuine_signature}",
            f"token signature does not verify with key {kid!r}",
        ),
        "own-key-under-the-issuers-kid": (
            jwt.encode({"alg": "RS256", "kid": kid}, escalated, own_key),
            f"token signature does not verify with key {kid!r}",
        ),
        "own-key-id": (
            jwt.encode({"alg": "RS256", "kid": "attacker-key"}, escalated, other_kid),
            "token key id 'attacker-key' is not among the signing keys",
        ),
    }


FORGERIES = (
    "alg-none",
    "hs256-with-the-public-key",
    "changed-payload",
    "own-key-under-the-issuers-kid",
    "own-key-id",
)


@pytest.mark.parametrize("forgery", FORGERIES)
def test_a_forged_token_binds_nothing(
    forgery: str,
    bind_api: str,
    genuine: str,
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
) -> None:
    admin = Kube(clusters["control-plane"])
    token, refusal = forgeries(stack, genuine)[forgery]
    before = {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]}
    response = httpx.post(
        f"{bind_api}/api/v1/bindings",
        headers={"Authorization": f"Bearer {token}"},
        json={"clusterId": f"forged-{uuid.uuid4().hex[:8]}", "apis": [API]},
        timeout=30,
    )
    assert response.status_code == 401, response.text
    assert response.json()["detail"].startswith(refusal), response.json()
    assert response.headers["www-authenticate"] == 'Bearer error="invalid_token"'
    # only new ones count: another module's namespaces may finish terminating meanwhile
    assert {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]} - before == set()


def test_a_genuine_token_for_another_client_binds_nothing(
    bind_api: str, stack: StackInfo, clusters: dict[str, client.ApiClient]
) -> None:
    """Dex signs it, for the CLI's public client: the bind API's audience is the automation
    client's, so the CLI's token (or any other relying party's) is no key to it."""
    with httpx.Client(verify=ssl.create_default_context(cafile=stack.dex.ca), timeout=10) as http:
        response = http.post(
            f"{stack.dex.issuer}/token",
            data={
                "grant_type": "password",
                "username": stack.dex.email,
                "password": stack.dex.password,
                "scope": "openid email groups",
                "client_id": stack.dex.cli_client_id,
            },
        )
    if response.status_code != 200:  # Dex refuses the password grant to a public client
        pytest.fail(f"Dex gave the CLI client no token: {response.status_code} {response.text}")
    token = response.json()["id_token"]
    admin = Kube(clusters["control-plane"])
    before = {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]}
    refused = httpx.post(
        f"{bind_api}/api/v1/bindings",
        headers={"Authorization": f"Bearer {token}"},
        json={"clusterId": f"foreign-{uuid.uuid4().hex[:8]}", "apis": [API]},
        timeout=30,
    )
    assert refused.status_code == 401, refused.text
    assert refused.json()["detail"] == (
        f"token audience ['{stack.dex.cli_client_id}'] does not include "
        f"{stack.dex.automation_client_id}"
    )
    # only new ones count: another module's namespaces may finish terminating meanwhile
    assert {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]} - before == set()
