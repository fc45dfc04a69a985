"""Every wrong input a person can give ``klutch-bind`` ends in one error line (and its fix), exit
code 1 — or 2 for usage errors, as click answers them — and never a traceback.

Each case runs the real command as a subprocess; none needs a running bind API, so the
unreachable ones point at a port nothing listens on.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from klutch_gitops.bind import token_cache
from klutch_gitops.dev.localstack.processes import free_port

from .bindapi import cli, token_args

DEAD = f"http://127.0.0.1:{free_port()}"  # nothing listens here


def unreachable_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig with one context ``app`` whose server does not answer."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": DEAD.replace("http", "https")}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "app", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "app",
            }
        )
    )
    return path


def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


def expired_login_with_a_lost_ca(tmp_path: Path) -> str:
    """A cached login whose ID token has expired and whose --ca file is gone since."""
    issuer = "https://dex.example.com"
    tokens = {
        "issuer": issuer,
        "client_id": "cli",
        "id_token": "x.y.z",
        "refresh_token": "r",
        "expires_at": time.time() - 60,
        "ca": str(tmp_path / "gone-ca.pem"),
    }
    directory = tmp_path / "config" / "klutch-gitops" / "tokens"
    directory.mkdir(parents=True)
    (directory / token_cache.cache_path(issuer, "cli").name).write_text(json.dumps(tokens))
    return issuer


CASES = {
    "login --ca missing": (
        lambda t: ["login", "--issuer", DEAD, "--client-id", "c", "--device", "--ca", "/nope"],
        1,
        "cannot use --ca /nope: No such file or directory",
    ),
    "login, token cache not writable": (
        lambda t: [
            "login",
            "--issuer",
            DEAD,
            "--client-id",
            "c",
            "--device",
        ],  # see CACHE_IS_A_FILE
        1,
        "cannot write the token cache",
    ),
    "login, issuer unreachable": (
        lambda t: ["login", "--issuer", DEAD, "--client-id", "c", "--device"],
        1,
        "cannot read the OIDC discovery document",
    ),
    "login, issuer not a URL": (
        lambda t: ["login", "--issuer", "http://[::1", "--client-id", "c", "--device"],
        2,
        "Invalid value for '--issuer'",
    ),
    "token, login's CA file gone": (
        lambda t: ["token", "--issuer", expired_login_with_a_lost_ca(t)],
        1,
        "gone-ca.pem: No such file or directory",
    ),
    "bind API unreachable": (
        lambda t: ["status", DEAD, *token_args(t, "not-used")],
        1,
        "cannot reach the bind API",
    ),
    "bind API URL not a URL": (
        lambda t: ["exports", "bind.example.com", *token_args(t, "not-used")],
        2,
        "is not an http(s) URL",
    ),
    "bad --output": (
        lambda t: ["status", DEAD, *token_args(t, "not-used"), "-o", "table"],
        2,
        "Invalid value for '-o' / '--output'",
    ),
    "not logged in": (
        lambda t: ["status", DEAD, "--issuer", "https://dex.example.com"],
        1,
        "not logged in to https://dex.example.com",
    ),
    "kubeconfig missing": (
        lambda t: [
            "bind",
            DEAD,
            "--api",
            "a.b",
            *token_args(t, "not-used"),
            "--yes",
            "--kubeconfig",
            "/nope",
        ],
        1,
        "cannot read kubeconfig /nope",
    ),
    "unknown --context": (
        lambda t: [
            "unbind",
            DEAD,
            "c",
            *token_args(t, "not-used"),
            "--kubeconfig",
            str(unreachable_kubeconfig(t)),
            "--context",
            "nowhere",
        ],
        1,
        "has no context 'nowhere'",
    ),
    "App Cluster unreachable": (
        lambda t: [
            "unbind",
            DEAD,
            "c",
            *token_args(t, "not-used"),
            "--yes",
            "--kubeconfig",
            str(unreachable_kubeconfig(t)),
        ],
        1,
        "cannot reach the App Cluster",
    ),
    "--gitops-out not writable": (
        lambda t: [
            "bind",
            DEAD,
            "--api",
            "a.b",
            "--cluster-id",
            "c",
            *token_args(t, "not-used"),
            "--yes",
            "--gitops-out",
            str(a_file(t) / "out"),
        ],
        1,
        "cannot write to --gitops-out",
    ),
    "--git-password-file missing": (
        lambda t: [
            "bind",
            DEAD,
            "--api",
            "a.b",
            "--cluster-id",
            "c",
            *token_args(t, "not-used"),
            "--yes",
            "--repo",
            "https://git.example.com/t.git",
            "--namespace",
            "t",
            "--git-password-file",
            "/nope",
        ],
        1,
        "cannot read --git-password-file /nope",
    ),
    "a token on argv": (
        lambda t: ["status", DEAD, "--token", "eyJ.secret.sig"],
        2,
        "--token is gone: a token on the command line is visible to every user",
    ),
    "--token-file missing": (
        lambda t: ["status", DEAD, "--token-file", "/nope"],
        1,
        "cannot read --token-file /nope",
    ),
    "no URL and no login remembered": (
        lambda t: ["status", "--context", "kind-app"],
        1,
        "no bind API URL remembered for kubectl context kind-app",
    ),
    "unbind with three arguments": (
        lambda t: ["unbind", DEAD, "a", "b", *token_args(t, "not-used")],
        2,
        "expected [URL] CONSUMER, got 3 arguments",
    ),
    "negative --timeout": (
        lambda t: ["unbind", DEAD, "c", *token_args(t, "not-used"), "--timeout", "-1"],
        2,
        "Invalid value for '--timeout'",
    ),
}


CACHE_IS_A_FILE = {"login, token cache not writable"}  # $XDG_CONFIG_HOME names a file


def one_line_error(result: subprocess.CompletedProcess[str], code: int, message: str) -> None:
    """Exit ``code``; no traceback; one error line carrying ``message``, last on stderr or
    followed only by its ``fix:`` line."""
    assert result.returncode == code, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error:")]
    assert len(errors) == 1, result.stderr
    assert message in errors[0], result.stderr
    fixed = lines[-2:] == [errors[0], lines[-1]] and lines[-1].startswith("fix: ")
    assert lines[-1] == errors[0] or fixed, result.stderr


@pytest.mark.parametrize("case", CASES)
def test_wrong_input_is_one_clear_error(case: str, tmp_path: Path) -> None:
    args, code, message = CASES[case]
    env = {"XDG_CONFIG_HOME": str(a_file(tmp_path))} if case in CACHE_IS_A_FILE else None
    one_line_error(cli(tmp_path, *args(tmp_path), env=env), code, message)
