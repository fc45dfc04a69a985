"""``klutch-bind login`` against the real Dex: device flow, browser flow with PKCE, refresh."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlparse

import httpx
import pytest

from klutch_gitops import oidc_client
from klutch_gitops.bind import browser_login, device_login, token_cache
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.errors import KlutchError

from .dexflows import browser, form

CLI = [sys.executable, "-m", "klutch_gitops.bind.cli"]


@pytest.fixture
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture
def dex_http(stack: StackInfo) -> Iterator[httpx.Client]:
    with oidc_client.http_client(stack.dex.ca) as http:
        yield http


def cli(config_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(config_home)}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def log_in_on_dex(
    stack: StackInfo, http: httpx.Client, url: str, follow: bool = True
) -> httpx.Response:
    """A person in a browser: open ``url``, pass any code form, log in with the password."""
    page = http.get(url, follow_redirects=True)
    while "password" not in page.text.lower() or "<form" not in page.text:
        action, fields = form(page)
        page = http.post(action, data=fields, follow_redirects=True)
    action, fields = form(page)
    fields.update(login=stack.dex.email, password=stack.dex.password)
    return http.post(action, data=fields, follow_redirects=follow)


def dex_callback(stack: StackInfo, http: httpx.Client, url: str, redirect: str) -> str:
    """Log in and follow Dex's redirects up to (not into) the loopback callback."""
    response = log_in_on_dex(stack, http, url, follow=False)
    while response.is_redirect:
        location = urljoin(str(response.url), response.headers["location"])
        if location.startswith(redirect):
            return location
        response = http.get(location)
    raise AssertionError(f"Dex did not redirect to {redirect}: {response.status_code}")


def check_cache(config_home: Path, stack: StackInfo) -> dict:
    path = token_cache.cache_path(stack.dex.issuer, stack.dex.cli_client_id)
    assert path.parent == config_home / "klutch-gitops" / "tokens"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    cached = json.loads(path.read_text())
    claims = oidc_client.unverified_claims(cached["id_token"])
    assert claims["aud"] == stack.dex.cli_client_id
    assert claims["email"] == stack.dex.email
    assert cached["refresh_token"]
    assert cached["expires_at"] == claims["exp"]
    return cached


def test_device_login_caches_tokens_and_token_prints_them(
    stack: StackInfo, config_home: Path
) -> None:
    """The CLI end to end; stdin is not a terminal, so the device flow is the default."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(config_home)}
    args = ["login", "--issuer", stack.dex.issuer, "--client-id", stack.dex.cli_client_id]
    with subprocess.Popen(
        [*CLI, *args, "--ca", stack.dex.ca],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as login:
        try:
            assert login.stderr
            prompt = [login.stderr.readline() for _ in range(3)]
            assert prompt[0].startswith("open "), prompt
            assert "/device" in prompt[0], prompt
            user_code = prompt[1].split()[-1]
            complete = prompt[2].split()[-1]
            assert complete.endswith(f"user_code={user_code}"), prompt
            with browser(stack) as http:
                assert log_in_on_dex(stack, http, complete).status_code == 200
            stdout, stderr = login.communicate(timeout=60)
        finally:
            login.kill()  # a failed approval would leave it polling until the code expires
    assert login.returncode == 0, stderr
    assert f"logged in as {stack.dex.email}" in stdout
    cached = check_cache(config_home, stack)
    assert cached["id_token"] not in stdout + stderr + "".join(prompt)

    token = cli(config_home, "token", "--issuer", stack.dex.issuer)
    assert token.returncode == 0, token.stderr
    assert token.stdout.strip() == cached["id_token"]


def test_refresh_gives_a_new_id_token(
    stack: StackInfo, config_home: Path, dex_http: httpx.Client
) -> None:
    login_by_device(stack, dex_http)
    path = token_cache.cache_path(stack.dex.issuer, stack.dex.cli_client_id)
    old = json.loads(path.read_text())
    path.write_text(json.dumps({**old, "expires_at": time.time() + 30}))  # within the 60 s
    time.sleep(1.1)  # Dex's tokens are deterministic within a second (iat, exp)

    token = cli(config_home, "token", "--issuer", stack.dex.issuer)
    assert token.returncode == 0, token.stderr
    new = check_cache(config_home, stack)
    assert token.stdout.strip() == new["id_token"] != old["id_token"]
    assert new["expires_at"] > time.time() + 60
    assert stat.S_IMODE(path.stat().st_mode) == 0o600

    path.write_text(json.dumps({**new, "expires_at": 0, "refresh_token": "revoked"}))
    refused = cli(config_home, "token", "--issuer", stack.dex.issuer)
    assert refused.returncode == 1
    assert "klutch-bind login" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_logout_forgets_the_tokens(
    stack: StackInfo, config_home: Path, dex_http: httpx.Client
) -> None:
    login_by_device(stack, dex_http)
    logout = cli(config_home, "logout", "--issuer", stack.dex.issuer)
    assert logout.returncode == 0, logout.stderr
    # Dex names no revocation_endpoint (dexidp/dex#1778): the CLI says so instead of pretending.
    assert "does not support token revocation" in " ".join(logout.stdout.split())
    assert not token_cache.cache_path(stack.dex.issuer, stack.dex.cli_client_id).exists()
    token = cli(config_home, "token", "--issuer", stack.dex.issuer)
    assert token.returncode == 1
    assert "not logged in" in token.stderr


def login_by_device(stack: StackInfo, http: httpx.Client) -> None:
    """The library path of ``login --device``, approving the code as the person would."""
    provider = oidc_client.discover(http, stack.dex.issuer)
    client_id = stack.dex.cli_client_id
    device = device_login.start_device_authorization(
        http, provider, client_id, oidc_client.DEFAULT_SCOPES
    )
    with browser(stack) as person:
        assert device.verification_uri_complete
        log_in_on_dex(stack, person, device.verification_uri_complete)
    body = device_login.poll_device_token(http, provider, client_id, device)
    token_cache.save(
        token_cache.tokens_from_response(stack.dex.issuer, client_id, stack.dex.ca, body)
    )


def test_browser_login_with_pkce_refuses_a_wrong_state(
    stack: StackInfo, config_home: Path, dex_http: httpx.Client
) -> None:
    refused: list[int] = []

    def open_browser(url: str) -> None:
        assert "code_challenge_method=S256" in url
        redirect = parse_qs(urlparse(url).query)["redirect_uri"][0]
        with browser(stack) as http:
            callback = dex_callback(stack, http, url, redirect)
            forged = re.sub(r"state=[^&]+", "state=forged", callback)
            refused.append(http.get(forged).status_code)
            done = http.get(callback)
            assert done.status_code == 200, done.text

    provider = oidc_client.discover(dex_http, stack.dex.issuer)
    body = browser_login.browser_login(
        dex_http,
        provider,
        stack.dex.cli_client_id,
        oidc_client.DEFAULT_SCOPES,
        open_browser,
    )
    assert refused == [400]
    tokens = token_cache.tokens_from_response(
        stack.dex.issuer, stack.dex.cli_client_id, stack.dex.ca, body
    )
    token_cache.save(tokens)
    check_cache(config_home, stack)


def test_browser_login_does_not_complete_with_a_wrong_state(
    stack: StackInfo, dex_http: httpx.Client
) -> None:
    def open_browser(url: str) -> None:
        redirect = parse_qs(urlparse(url).query)["redirect_uri"][0]
        with browser(stack) as http:
            callback = dex_callback(stack, http, url, redirect)
            assert http.get(re.sub(r"state=[^&]+", "state=forged", callback)).status_code == 400

    provider = oidc_client.discover(dex_http, stack.dex.issuer)
    with pytest.raises(KlutchError, match="no login callback arrived"):
        browser_login.browser_login(
            dex_http,
            provider,
            stack.dex.cli_client_id,
            oidc_client.DEFAULT_SCOPES,
            open_browser,
            timeout=3,
        )


def test_dex_accepts_a_loopback_redirect_on_any_port_and_no_other_host(
    stack: StackInfo, dex_http: httpx.Client
) -> None:
    """RFC 8252 §7.3: the CLI listens on an ephemeral port; nothing else may receive the code."""
    provider = oidc_client.discover(dex_http, stack.dex.issuer)
    _, challenge = oidc_client.new_pkce()

    def url(redirect: str) -> str:
        return oidc_client.authorization_url(
            provider, stack.dex.cli_client_id, redirect, "openid", "state", "nonce", challenge
        )

    with browser(stack) as http:
        accepted = http.get(url(browser_login.redirect_uri(49152)), follow_redirects=True)
        refused = http.get(url("http://evil.example/callback"), follow_redirects=True)
    assert accepted.status_code == 200
    assert "password" in accepted.text.lower()
    assert refused.status_code == 400
    assert "Unregistered redirect_uri" in refused.text
