"""A real Gitea for the pull-request review tests, used through its API: the binary `make bins`
builds, SQLite in a temporary directory, HTTP on a loopback port, no SSH, and an admin user and
API token made with Gitea's own CLI. Webhooks may go to loopback addresses (the reconciler)."""

from __future__ import annotations

import getpass
import os
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.processes import Process, free_port
from klutch_gitops.errors import KlutchError
from tests.kit.wait import eventually

USER = "klutch-admin"
START_TIMEOUT = 60.0


@dataclass
class Gitea:
    url: str  # http://127.0.0.1:PORT, Gitea's ROOT_URL without the slash
    token: str  # the admin's API token, every scope
    token_file: Path
    root: Path
    process: Process

    def api(self) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/api/v1",
            headers={"Authorization": f"token {self.token}"},
            timeout=30.0,
        )

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        with self.api() as api:
            response = api.request(method, path, **kwargs)
        assert response.is_success, f"Gitea {method} {path}: {response.status_code} {response.text}"
        return response.json() if response.content else None

    def clone_url(self, repo: str) -> str:
        return f"{self.url}/{USER}/{repo}.git"

    def push_url(self, repo: str) -> str:
        """The clone URL with the admin's token in it, for a person's clone."""
        return f"{self.url.replace('://', f'://{USER}:{self.token}@')}/{USER}/{repo}.git"

    def bare(self, repo: str) -> Path:
        """Where Gitea keeps the repository on disk."""
        return self.root / "repositories" / USER / f"{repo.lower()}.git"

    def create_repo(self, name: str) -> dict:
        return self.call(
            "POST", "/user/repos", json={"name": name, "private": True, "default_branch": "main"}
        )

    def add_webhook(self, repo: str, url: str, secret: str) -> dict:
        """A Gitea webhook for pushes and pull requests, signed with ``secret``."""
        hook = {
            "type": "gitea",
            "active": True,
            "events": ["push", "pull_request"],
            "config": {"url": url, "content_type": "json", "secret": secret},
        }
        return self.call("POST", f"/repos/{USER}/{repo}/hooks", json=hook)

    def open_pull(self, repo: str, head: str, base: str, title: str) -> dict:
        """Open a pull request; Gitea knows a pushed branch only once it processed the push."""

        def opened() -> dict | None:
            with self.api() as api:
                response = api.post(
                    f"/repos/{USER}/{repo}/pulls", json={"head": head, "base": base, "title": title}
                )
            return response.json() if response.status_code == 201 else None

        return eventually(opened, f"Gitea to open a pull request from {head}", timeout=30)

    def comments(self, repo: str, number: int) -> list[dict]:
        return self.call("GET", f"/repos/{USER}/{repo}/issues/{number}/comments")

    def statuses(self, repo: str, sha: str) -> dict[str, str]:
        """The newest state of every status context of a commit."""
        combined = self.call("GET", f"/repos/{USER}/{repo}/commits/{sha}/status")
        return {s["context"]: s["status"] for s in combined.get("statuses") or []}


def _config(root: Path, port: int, static: Path) -> str:
    data = root / "data"
    return f"""APP_NAME = klutch-gitops tests
RUN_MODE = prod
RUN_USER = {getpass.getuser()}
WORK_PATH = {root}
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = {str(os.getuid() == 0).lower()}

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = {port}
ROOT_URL = http://127.0.0.1:{port}/
DISABLE_SSH = true
START_SSH_SERVER = false
OFFLINE_MODE = true
LFS_START_SERVER = false
STATIC_ROOT_PATH = {static}
APP_DATA_PATH = {data}

[database]
DB_TYPE = sqlite3
PATH = {data}/gitea.db

[repository]
ROOT = {root}/repositories

[security]
INSTALL_LOCK = true

[service]
DISABLE_REGISTRATION = true

[webhook]
ALLOWED_HOST_LIST = loopback

[log]
MODE = file
LEVEL = info
ROOT_PATH = {root}/log

[mailer]
ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[cron]
ENABLED = false
"""


def _cli(gitea: Path, config: Path, root: Path, *args: str) -> str:
    result = subprocess.run(
        [str(gitea), *args, "--config", str(config), "--work-path", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"gitea {' '.join(args[:3])} failed:\n{result.stderr}"
    return result.stdout


@contextmanager
def running_gitea(root: Path) -> Iterator[Gitea]:
    """Gitea in ``root``, stopped afterwards; a missing binary fails with how to build it."""
    try:
        built = binaries.require("gitea", "gitea-static")
    except KlutchError as error:
        message = f"the pull-request tests need Gitea: {error.message}; {error.fix}"
        pytest.fail(message, pytrace=False)
    port = free_port()
    config = root / "app.ini"
    config.write_text(_config(root, port, built["gitea-static"]))
    gitea = built["gitea"]
    _cli(gitea, config, root, "migrate")
    password = secrets.token_urlsafe(16)
    _cli(
        gitea,
        config,
        root,
        *("admin", "user", "create", "--username", USER, "--password", password),
        *("--email", f"{USER}@example.com", "--admin", "--must-change-password=false"),
    )
    token = _cli(
        gitea,
        config,
        root,
        *("admin", "user", "generate-access-token", "--username", USER),
        *("--token-name", "tests", "--scopes", "all", "--raw"),
    ).splitlines()[-1]  # after a warning when run as root
    token_file = root / "token"
    token_file.write_text(token)
    process = Process(
        "gitea",
        [str(gitea), "web", "--config", str(config), "--work-path", str(root)],
        root / "gitea.log",
        root / "gitea.pid",
    )
    process.start()
    url = f"http://127.0.0.1:{port}"
    try:
        process.wait_until(lambda: _answers(f"{url}/api/v1/version"), "API", START_TIMEOUT)
        yield Gitea(url, token, token_file, root, process)
    finally:
        process.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).is_success
    except httpx.HTTPError:
        return False
