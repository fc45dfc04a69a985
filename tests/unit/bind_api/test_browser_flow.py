"""The browser flow's decisions, its tokens, and its callback checks against a fake issuer
(httpx MockTransport); the real Dex round trip is tests/integration/test_bind_browser.py."""

from __future__ import annotations

import base64
import json
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from fastapi.testclient import TestClient

from bind_api.app import create_app
from bind_api.browser_flow import (
    LOGIN_COOKIE,
    SESSION_COOKIE,
    FlowError,
    binding_provider,
    binding_response,
    cli_callback,
    response_url,
)
from bind_api.browser_login import BrowserLogin
from bind_api.config import BindApiConfig, BrowserFlow
from bind_api.oidc import OIDCVerifier
from bind_api.sessions import SessionCodec, SessionError
from klutch_gitops.config import SecretRef

from .test_oidc import AUDIENCE, ISSUER, NOW, RSA, mint, public

KEY = b"k" * 32


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


# -- decisions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        (
            {
                "redirect_url": "http://localhost:5000/callback",
                "session_id": "s",
                "cluster_id": "c",
            },
            ("http://localhost:5000/callback", "s", "c"),
        ),
        (
            {"redirect_url": "http://127.0.0.1:5000/cb", "session_id": "s", "cluster_id": "c"},
            ("http://127.0.0.1:5000/cb", "s", "c"),
        ),
        (
            {"p": "34961", "s": "4cgpcy", "c": "5hW2mW"},
            ("http://localhost:34961/callback", "4cgpcy", "5hW2mW"),
        ),
        (
            {"redirect_url": "http://[::1]:5000/callback", "session_id": "s", "cluster_id": "c"},
            ("http://[::1]:5000/callback", "s", "c"),
        ),
    ],
)
def test_loopback_callbacks_are_accepted(params: dict, expected: tuple) -> None:
    assert cli_callback(params) == expected


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"redirect_url": "https://localhost:5000/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost/cb"}, "not a loopback callback"),  # no port
        ({"redirect_url": "http://evil.example:5000/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost.evil.example:5000/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://127.0.0.1@evil.example:5000/cb"}, "not a loopback callback"),
        ({"p": "0"}, "is not a port"),
        ({"p": "http"}, "is not a port"),
        ({"p": "5000", "session_id": "s" * 300}, "session_id is not a session ID"),
        ({"p": "5000", "cluster_id": "app#1"}, "cluster_id 'app#1' is not a cluster ID"),
        ({"p": "99999"}, "p='99999' is not a port"),
        ({"p": "abc"}, "p='abc' is not a port"),
        ({"p": "\u0665\u0660\u0660\u0660"}, "is not a port"),  # digits, but not ASCII ones
        ({"redirect_url": "http://localhost:99999/callback"}, "redirect_url port='99999'"),
        ({"redirect_url": "http://localhost:abc/callback"}, "not a loopback callback"),
        # Spellings that parsers disagree on: the host is not what a browser would reach.
        ({"redirect_url": "http://evil.example\\@localhost:1234/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost:1234/cb#@evil.example"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost:1234#@evil.example/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://local\thost:1234/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost\t:1234/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost :1234/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost\x00:1234/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://user@localhost:1234/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://localhost:1234/cb?next=https://evil.example"}, "loopback"),
        ({"redirect_url": "http://localhost:1234/%2F%2Fevil.example"}, "not a loopback callback"),
        ({"redirect_url": "http://LOCALHOST:1234/cb\n"}, "not a loopback callback"),
        ({"redirect_url": "http://0.0.0.0:1234/cb"}, "not a loopback callback"),
        ({"redirect_url": "http://127.0.0.2:1234/cb"}, "not a loopback callback"),
        ({}, "/authorize needs redirect_url"),
    ],
)
def test_other_callbacks_are_refused(params: dict, message: str) -> None:
    params = {"session_id": "s", "cluster_id": "c", **params}
    with pytest.raises(FlowError) as refused:
        cli_callback(params)
    assert message in refused.value.message
    assert refused.value.status == 400


def test_the_binding_response_reaches_the_cli_as_kube_bind_reads_it() -> None:
    response = binding_response("sid-1", "https://dex/sub", "apiVersion: v1\n", [{"kind": "R"}])
    url = response_url("http://localhost:5000/callback", response)
    encoded = parse_qs(urlsplit(url).query)["response"][0]
    decoded = json.loads(base64.b64decode(encoded))
    assert decoded["kind"] == "BindingResponse"
    assert decoded["authentication"] == {
        "oauth2CodeGrant": {"sid": "sid-1", "id": "https://dex/sub"}
    }
    assert base64.b64decode(decoded["kubeconfig"]) == b"apiVersion: v1\n"
    assert binding_provider("https://bind.example")["authenticationMethods"][0][
        "oauth2CodeGrant"
    ] == {"authenticatedURL": "https://bind.example/authorize"}


# -- tokens -----------------------------------------------------------------------------------


def test_sealed_and_signed_tokens_keep_their_purpose_and_expire() -> None:
    clock = Clock()
    codec = SessionCodec(KEY, clock)
    sealed = codec.seal("login", {"nonce": "a-secret-verifier"}, 60)
    signed = codec.sign("state", {"login": "f"}, 60)
    assert codec.open("login", sealed)["nonce"] == "a-secret-verifier"
    assert codec.verify("state", signed)["login"] == "f"
    assert b"a-secret-verifier" not in b"".join(
        base64.urlsafe_b64decode(part + "==") for part in sealed.split(".")
    )  # encrypted, not just encoded
    for wrong in (
        lambda: codec.open("session", sealed),
        lambda: codec.open("login", signed),
        lambda: codec.verify("state", sealed),
        lambda: codec.verify("state", signed[:-2] + ("AA" if signed[-2:] != "AA" else "BB")),
        lambda: SessionCodec(b"o" * 32, clock).open("login", sealed),
        lambda: codec.open("login", None),
    ):
        with pytest.raises(SessionError):
            wrong()
    clock.now += 61
    with pytest.raises(SessionError, match="has expired"):
        codec.open("login", sealed)
    with pytest.raises(ValueError, match="at least 32 bytes"):
        SessionCodec(b"short")


# -- the callback against a fake issuer -------------------------------------------------------


class Issuer:
    """Discovery, JWKS and a token endpoint whose ID token carries ``self.nonce``."""

    def __init__(self) -> None:
        self.nonce = ""
        self.token_requests: list[dict[str, list[str]]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path.endswith("/.well-known/openid-configuration"):
            return httpx.Response(
                200,
                json={
                    "issuer": ISSUER,
                    "jwks_uri": f"{ISSUER}/keys",
                    "authorization_endpoint": f"{ISSUER}/auth",
                    "token_endpoint": f"{ISSUER}/token",
                },
            )
        if path.endswith("/keys"):
            return httpx.Response(200, json={"keys": [public(RSA)]})
        assert path.endswith("/token")
        self.token_requests.append(parse_qs(request.content.decode()))
        return httpx.Response(200, json={"id_token": mint(nonce=self.nonce)})


@pytest.fixture
def flow() -> tuple[TestClient, Issuer, Clock]:
    issuer, clock = Issuer(), Clock()
    http = httpx.Client(transport=httpx.MockTransport(issuer))
    login = BrowserLogin(
        flow=BrowserFlow("http://testserver", AUDIENCE, SecretRef(env="UNUSED")),
        client_secret="secret",
        codec=SessionCodec(KEY, clock),
        verifier=OIDCVerifier(ISSUER, (AUDIENCE,), http=http, clock=clock),
        http=http,
        issuer=ISSUER,
    )
    config = BindApiConfig(Path("unused"), ISSUER, (AUDIENCE,))
    app = create_app(config, None, login.verifier, login)  # type: ignore[arg-type]
    return TestClient(app, follow_redirects=False), issuer, clock


def authorize(client: TestClient) -> dict[str, str]:
    started = client.get(
        "/authorize",
        params={
            "redirect_url": "http://localhost:1/callback",
            "session_id": "s",
            "cluster_id": "c",
        },
    )
    assert started.status_code == 302
    assert client.cookies.get(LOGIN_COOKIE)
    return {k: v[0] for k, v in parse_qs(urlsplit(started.headers["location"]).query).items()}


def test_a_matching_nonce_opens_a_session_and_the_verifier_goes_to_the_issuer(flow) -> None:
    client, issuer, _ = flow
    query = authorize(client)
    issuer.nonce = query["nonce"]
    done = client.get("/callback", params={"code": "c0de", "state": query["state"]})
    assert done.status_code == 303
    assert done.headers["location"] == "resources"
    assert client.cookies.get(SESSION_COOKIE)
    (sent,) = issuer.token_requests
    assert sent["code"] == ["c0de"]
    assert sent["redirect_uri"] == ["http://testserver/callback"]
    assert len(sent["code_verifier"][0]) >= 43


def test_an_id_token_for_another_login_is_refused_by_its_nonce(flow) -> None:
    client, issuer, _ = flow
    query = authorize(client)
    issuer.nonce = "someone-elses"
    done = client.get("/callback", params={"code": "c0de", "state": query["state"]})
    assert done.status_code == 401
    assert "nonce is not this login's" in unescape(done.text)
    assert not client.cookies.get(SESSION_COOKIE)


def test_a_late_callback_is_refused(flow) -> None:
    client, issuer, clock = flow
    query = authorize(client)
    issuer.nonce = query["nonce"]
    clock.now += 601
    done = client.get("/callback", params={"code": "c0de", "state": query["state"]})
    assert done.status_code == 400
    assert "has expired" in done.text
    assert issuer.token_requests == []


def test_an_issuer_error_is_shown_after_the_state_is_checked(flow) -> None:
    client, _, _ = flow
    query = authorize(client)
    denied = client.get(
        "/callback",
        params={"error": "access_denied", "error_description": "nope", "state": query["state"]},
    )
    assert denied.status_code == 400
    assert "the issuer refused the login: nope" in denied.text
    client.cookies.clear()
    unbound = client.get("/callback", params={"error": "access_denied", "state": query["state"]})
    assert "does not belong to a login started in this browser" in unbound.text
