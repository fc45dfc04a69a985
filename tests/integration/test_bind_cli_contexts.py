"""``klutch-bind login URL`` against the real Dex and a real bind API, then plain commands: the
bind API, issuer and client are remembered for the kubectl context (as ``argocd login`` keeps a
context: argoproj/argo-cd ``cmd/argocd/commands/login.go``, ``util/localconfig``), the tokens
stay in the token cache, and ``logout`` forgets both."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bind_api.server import build_server
from klutch_gitops.bind import contexts, token_cache
from klutch_gitops.dev.localstack.stack import StackInfo

from .bindapi import API, CLI, bind_api_config, offered_api, serving
from .dexflows import browser
from .test_bind_login import log_in_on_dex


@pytest.fixture(scope="module")
def bind_url(stack: StackInfo, clusters) -> Iterator[str]:
    """A bind API that accepts the CLI client's ID tokens (the login's audience)."""
    audiences = (stack.dex.automation_client_id, stack.dex.cli_client_id)
    with (
        offered_api(clusters),
        serving(build_server(bind_api_config(stack, audiences=audiences))) as url,
    ):
        yield url


@pytest.fixture
def env(stack: StackInfo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A config home (this process's too, to read it) and $KUBECONFIG naming the App Cluster
    (its context: ``app``)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return {**os.environ, "KUBECONFIG": stack.clusters["app"].kubeconfig}


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def device_login(stack: StackInfo, env: dict[str, str], *args: str) -> str:
    """``klutch-bind login ARGS`` by the device flow, approved on Dex as the person would."""
    with subprocess.Popen(
        [*CLI, "login", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as login:
        try:
            assert login.stderr
            prompt = [login.stderr.readline() for _ in range(3)]
            assert prompt[2].startswith("or open"), prompt
            with browser(stack) as http:
                assert log_in_on_dex(stack, http, prompt[2].split()[-1]).status_code == 200
            stdout, stderr = login.communicate(timeout=60)
        finally:
            login.kill()
    assert login.returncode == 0, stderr
    return stdout


def test_login_url_then_plain_commands(
    stack: StackInfo, bind_url: str, env: dict[str, str]
) -> None:
    issuer, client = stack.dex.issuer, stack.dex.cli_client_id
    before = cli(env, "status")
    assert before.returncode == 1
    assert "no bind API URL remembered for kubectl context app" in before.stderr

    said = device_login(
        stack, env, bind_url, "--issuer", issuer, "--client-id", client, "--ca", stack.dex.ca
    )
    assert f"kubectl context app uses {bind_url}" in " ".join(said.split())
    path = contexts.config_path()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    remembered = yaml.safe_load(path.read_text())["contexts"]
    assert remembered == [
        {
            "context": "app",
            "server": bind_url,
            "issuer": issuer,
            "clientId": client,
            "issuerCa": stack.dex.ca,
        }
    ]
    id_token = json.loads(token_cache.cache_path(issuer, client).read_text())["id_token"]
    assert id_token not in path.read_text()

    exports = cli(env, "exports", "-o", "json")  # no URL, no --issuer
    assert exports.returncode == 0, exports.stderr
    assert API in [e["api"] for e in json.loads(exports.stdout)["exports"]]
    status = cli(env, "status")
    assert status.returncode == 0, status.stderr
    view = cli(env, "config", "view", "-o", "json")
    assert json.loads(view.stdout)["current-context"] == "app"
    token = cli(env, "token")
    assert token.stdout.strip() == id_token

    elsewhere = cli(env, "status", "--context", "control-plane")
    assert elsewhere.returncode == 1
    assert "kubectl context control-plane" in elsewhere.stderr

    logout = cli(env, "logout")
    assert logout.returncode == 0, logout.stderr
    assert "forgot the login of kubectl context app" in " ".join(logout.stdout.split())
    assert contexts.as_data([]) == yaml.safe_load(path.read_text())
    after = cli(env, "status")
    assert after.returncode == 1
    assert "klutch-bind login URL" in after.stderr
