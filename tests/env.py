"""What an integration test works in, as one fixture (``env``, registered in tests/conftest.py):
the session's stack and its admin clients, the test's own temporary directory and undo list, and
the session's Git server, started only when a test first asks for it. Tests took these as five
fixtures and handed all five on to their helpers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from klutch_gitops.config import Config
from klutch_gitops.dev.localstack.stack import StackInfo
from tests.gitserver import GitServer
from tests.kit.tenant import Tenant, make_tenant, quick_config


@dataclass(frozen=True)
class Env:
    stack: StackInfo
    clusters: dict[str, client.ApiClient]
    tmp_path: Path
    cleanup: list[Callable[[], Any]]  # undone after the test, last first
    request: pytest.FixtureRequest = field(repr=False)

    @property
    def git_server(self) -> GitServer:
        """The session's HTTPS Git server; asking for it sets GIT_SSL_CAINFO for the session."""
        server: GitServer = self.request.getfixturevalue("git_server")
        return server

    def tenant(self, *, home: Path | None = None, **options: Any) -> Tenant:
        """``make_tenant`` on this stack, on disk in ``home`` (else the test's directory)."""
        return make_tenant(self.stack, self.clusters, home or self.tmp_path, **options)

    def config(self, **fields: Any) -> Config:
        """``quick_config`` on this stack, in the test's directory: a reconciler's test config."""
        return quick_config(self.stack, self.tmp_path, **fields)
