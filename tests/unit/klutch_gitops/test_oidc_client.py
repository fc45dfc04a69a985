"""The OIDC client's logic: cache permissions, expiry, state/nonce, PKCE, device-flow polling."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from klutch_gitops import oidc_client
from klutch_gitops.bind import browser_login, device_login, token_cache
from klutch_gitops.bind import cli as bind_cli
from klutch_gitops.bind.browser_login import CallbackRefused
from klutch_gitops.bind.device_login import DeviceCode
from klutch_gitops.bind.token_cache import Tokens
from klutch_gitops.errors import KlutchError
from klutch_gitops.oidc_client import Provider

ISSUER = "https://dex.example"
PROVIDER = Provider(
    issuer=ISSUER,
    authorization_endpoint=f"{ISSUER}/auth",
    token_endpoint=f"{ISSUER}/token",
    device_authorization_endpoint=f"{ISSUER}/device/code",
)


def jwt(**claims: Any) -> str:
    """An unsigned JWT-shaped token: the client only reads claims, the bind API verifies."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'RS256'})}.{part(claims)}.c2lnbmF0dXJl"


def tokens(**changes: Any) -> Tokens:
    values = {
        "issuer": ISSUER,
        "client_id": "klutch-bind",
        "id_token": jwt(exp=2000),
        "refresh_token": "refresh-1",
        "expires_at": 2000.0,
        "ca": None,
    }
    return Tokens(**{**values, **changes})


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return tmp_path


# --- cache --------------------------------------------------------------------------------------


def test_cache_is_owner_only_even_with_a_lax_umask_and_an_open_directory(
    config_home: Path,
) -> None:
    directory = config_home / "klutch-gitops" / "tokens"
    directory.mkdir(parents=True, mode=0o755)
    old_umask = os.umask(0)
    try:
        path = token_cache.save(tokens())
    finally:
        os.umask(old_umask)
    key = hashlib.sha256(f"{ISSUER}klutch-bind".encode()).hexdigest()[:16]
    assert path == directory / f"{key}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert [p.name for p in directory.iterdir()] == [path.name]  # no temp file left behind
    content = json.loads(path.read_text())
    assert {"issuer", "client_id", "id_token", "refresh_token", "expires_at"} <= set(content)


def test_cache_is_replaced_atomically_and_read_back() -> None:
    token_cache.save(tokens())
    path = token_cache.save(tokens(id_token=jwt(exp=3000), expires_at=3000.0))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert token_cache.cached(ISSUER) == [tokens(id_token=jwt(exp=3000), expires_at=3000.0)]
    assert token_cache.cached("https://other.example") == []


def test_token_needs_a_client_id_when_logged_in_with_several() -> None:
    token_cache.save(tokens())
    token_cache.save(tokens(client_id="other"))
    with pytest.raises(KlutchError, match="several clients") as error:
        token_cache.fresh_id_token(ISSUER)
    assert error.value.fix == "pass --client-id"
    assert token_cache.fresh_id_token(ISSUER, "other", min_valid=-1e12) == tokens().id_token


def test_a_valid_token_is_returned_without_refresh() -> None:
    valid = tokens(expires_at=9e12)
    token_cache.save(valid)
    assert token_cache.fresh_id_token(ISSUER) == valid.id_token


def test_logout_removes_every_client_of_the_issuer() -> None:
    token_cache.save(tokens())
    token_cache.save(tokens(client_id="other"))
    token_cache.save(tokens(issuer="https://keep.example"))
    assert token_cache.remove(ISSUER) == 2
    assert token_cache.cached(ISSUER) == []
    assert len(token_cache.cached("https://keep.example")) == 1
    with pytest.raises(KlutchError, match="not logged in"):
        token_cache.fresh_id_token(ISSUER)


def test_a_corrupt_cache_names_the_file(config_home: Path) -> None:
    path = token_cache.save(tokens())
    path.write_text("{not json")
    with pytest.raises(KlutchError, match="not a klutch-bind token cache") as error:
        token_cache.cached(ISSUER, "klutch-bind")
    assert str(path) in error.value.fix


# --- expiry -------------------------------------------------------------------------------------


def test_expiry_comes_from_the_id_token_exp_claim() -> None:
    body = {"id_token": jwt(exp=1234, nonce="n"), "refresh_token": "r", "expires_in": 99999}
    entry = token_cache.tokens_from_response(ISSUER, "klutch-bind", "/ca.pem", body, now=1000)
    assert entry.expires_at == 1234
    assert entry.ca == "/ca.pem"


def test_expiry_falls_back_to_expires_in_and_the_old_refresh_token_is_kept() -> None:
    body = {"id_token": jwt(sub="x"), "expires_in": 300}
    entry = token_cache.tokens_from_response(ISSUER, "c", None, body, "old-refresh", now=1000)
    assert entry.expires_at == 1300
    assert entry.refresh_token == "old-refresh"


def test_expires_within() -> None:
    entry = tokens(expires_at=1000.0)
    assert not entry.expires_within(60, now=939)
    assert entry.expires_within(60, now=940)
    assert entry.expires_within(60, now=2000)


def test_a_response_without_an_id_token_is_refused() -> None:
    with pytest.raises(KlutchError, match="no ID token"):
        token_cache.tokens_from_response(ISSUER, "c", None, {"access_token": "a"})


# --- state, nonce, PKCE -------------------------------------------------------------------------


def test_callback_with_the_right_state_gives_the_code() -> None:
    assert browser_login.read_callback("code=abc&state=s1", "s1") == "abc"


@pytest.mark.parametrize("query", ["code=abc&state=s2", "code=abc", "state=&code=abc", ""])
def test_callback_with_a_wrong_or_missing_state_is_refused(query: str) -> None:
    with pytest.raises(CallbackRefused):
        browser_login.read_callback(query, "s1")


def test_callback_error_with_the_right_state_ends_the_login() -> None:
    with pytest.raises(KlutchError, match="denied by user"):
        browser_login.read_callback(
            "error=access_denied&error_description=denied+by+user&state=s1", "s1"
        )


def test_callback_without_a_code_is_refused() -> None:
    with pytest.raises(CallbackRefused, match="no authorization code"):
        browser_login.read_callback("state=s1", "s1")


def test_nonce_must_match() -> None:
    browser_login.check_nonce(jwt(nonce="n1"), "n1")
    for token in (jwt(nonce="n2"), jwt(sub="no nonce")):
        with pytest.raises(KlutchError, match="nonce"):
            browser_login.check_nonce(token, "n1")


def test_a_token_that_is_not_a_jwt_is_refused() -> None:
    with pytest.raises(KlutchError, match="not a JWT"):
        oidc_client.unverified_claims("opaque-token")


def test_pkce_verifier_and_s256_challenge() -> None:
    verifier, challenge = oidc_client.new_pkce()
    assert 43 <= len(verifier) <= 128
    assert set(verifier) <= set(
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
    )
    digest = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    assert challenge == digest.rstrip(b"=").decode()
    assert oidc_client.new_pkce()[0] != verifier


def test_authorization_url_carries_pkce_state_and_nonce() -> None:
    url = httpx.URL(
        oidc_client.authorization_url(
            PROVIDER, "klutch-bind", browser_login.redirect_uri(8000), "openid", "st", "no", "ch"
        )
    )
    assert url.params["redirect_uri"] == "http://localhost:8000/callback"
    assert url.params["code_challenge"] == "ch"
    assert url.params["code_challenge_method"] == "S256"
    assert (url.params["state"], url.params["nonce"]) == ("st", "no")
    assert browser_login.redirect_uri(49152) == "http://localhost:49152/callback"


# --- device flow polling ------------------------------------------------------------------------

DEVICE = DeviceCode(
    device_code="dev-1",
    user_code="ABCD-EFGH",
    verification_uri=f"{ISSUER}/device",
    verification_uri_complete=f"{ISSUER}/device?user_code=ABCD-EFGH",
    interval=5,
    expires_in=300,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def token_endpoint(answers: list[tuple[int, dict[str, Any]]]) -> httpx.Client:
    """A client whose token endpoint gives ``answers`` in order, checking each poll's form."""
    pending = iter(answers)

    def handle(request: httpx.Request) -> httpx.Response:
        form = dict(httpx.QueryParams(request.content.decode()))
        assert form == {
            "grant_type": device_login.DEVICE_GRANT,
            "device_code": "dev-1",
            "client_id": "klutch-bind",
        }
        status, body = next(pending)
        return httpx.Response(status, json=body)

    return httpx.Client(transport=httpx.MockTransport(handle))


def poll(answers: list[tuple[int, dict[str, Any]]], clock: FakeClock) -> dict[str, Any]:
    with token_endpoint(answers) as http:
        return device_login.poll_device_token(
            http, PROVIDER, "klutch-bind", DEVICE, sleep=clock.sleep, clock=clock
        )


def pending() -> tuple[int, dict[str, Any]]:
    return 400, {"error": "authorization_pending"}


def test_polling_waits_the_interval_and_slows_down_by_five_seconds() -> None:
    clock = FakeClock()
    answers = [
        pending(),
        (400, {"error": "slow_down"}),
        pending(),
        (200, {"id_token": "t"}),
    ]
    assert poll(answers, clock) == {"id_token": "t"}
    assert clock.sleeps == [5, 10, 10]


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("access_denied", "refused in the browser"),
        ("expired_token", "expired"),
        ("invalid_grant", "invalid_grant"),
    ],
)
def test_polling_stops_on_a_final_error(error: str, message: str) -> None:
    clock = FakeClock()
    with pytest.raises(KlutchError, match=message) as raised:
        poll([pending(), (400, {"error": error})], clock)
    assert "klutch-bind login" in raised.value.fix
    assert clock.sleeps == [5]


def test_polling_stops_when_the_code_expires_locally() -> None:
    clock = FakeClock()
    with pytest.raises(KlutchError, match="expired"):
        poll([pending()] * 100, clock)
    assert sum(clock.sleeps) <= DEVICE.expires_in
    assert len(clock.sleeps) == DEVICE.expires_in // DEVICE.interval  # last poll at expiry


# --- refresh ------------------------------------------------------------------------------------


def issuer_client(token_answer: Callable[[dict[str, str]], httpx.Response]) -> httpx.Client:
    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/.well-known/openid-configuration":
            return httpx.Response(
                200,
                json={
                    "issuer": ISSUER,
                    "authorization_endpoint": PROVIDER.authorization_endpoint,
                    "token_endpoint": PROVIDER.token_endpoint,
                },
            )
        return token_answer(dict(httpx.QueryParams(request.content.decode())))

    return httpx.Client(transport=httpx.MockTransport(handle))


def test_refresh_uses_the_refresh_token_and_keeps_the_ca() -> None:
    def answer(form: dict[str, str]) -> httpx.Response:
        assert form == {
            "grant_type": "refresh_token",
            "refresh_token": "refresh-1",
            "client_id": "klutch-bind",
        }
        return httpx.Response(200, json={"id_token": jwt(exp=5000), "refresh_token": "refresh-2"})

    with issuer_client(answer) as http:
        new = token_cache.refresh(http, tokens(ca="/ca.pem"))
    assert (new.expires_at, new.refresh_token, new.ca) == (5000, "refresh-2", "/ca.pem")


def test_a_failed_refresh_says_to_log_in_again() -> None:
    def answer(form: dict[str, str]) -> httpx.Response:
        return httpx.Response(400, json={"error": "invalid_request", "error_description": "bad"})

    with issuer_client(answer) as http, pytest.raises(KlutchError, match="bad") as error:
        token_cache.refresh(http, tokens())
    assert "klutch-bind login --issuer https://dex.example --client-id klutch-bind" in (
        error.value.fix
    )


def test_refresh_without_a_refresh_token_says_to_log_in_with_offline_access() -> None:
    with pytest.raises(KlutchError, match="no refresh token") as error:
        token_cache.refresh(httpx.Client(), tokens(refresh_token=None))
    assert "offline_access" in error.value.fix


# --- flow choice --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tty", "display", "headless"),
    [(True, {"DISPLAY": ":0"}, False), (True, {"WAYLAND_DISPLAY": "w"}, False), (False, {}, True)],
)
def test_headless_detection(
    monkeypatch: pytest.MonkeyPatch, tty: bool, display: dict[str, str], headless: bool
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    for name, value in display.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"isatty": lambda self: tty})())
    assert bind_cli.headless() is headless


def test_linux_without_a_display_is_headless(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(sys, "stdin", type("Stdin", (), {"isatty": lambda self: True})())
    assert bind_cli.headless()
