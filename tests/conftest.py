"""Tiers follow folders: tests/unit is marked ``unit``, tests/integration ``integration``,
tests/chaos ``chaos``, tests/security ``security``.

The real local stack is started once per run, by the first test that asks for it; the integration
and security tiers share it (each test gets its own namespaces), the chaos tier starts its own.
Under pytest-xdist "once per run" is once per worker: how the run is split is in tests/workers.py.
"""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from xdist.remote import Producer

from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo
from tests.env import Env
from tests.gitserver import GitServer, running_git_server
from tests.stack import admin_clients, running_stack
from tests.workers import WorkScheduling, claim_port_block


def pytest_configure(config: pytest.Config) -> None:
    # a process that runs tests: a worker (xdist sets its -n to None) or a run with -n 0, not
    # the controller of the workers
    if not getattr(config.option, "numprocesses", None):
        claim_port_block()


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which would return its LoadFileScheduling
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> WorkScheduling | None:
    return WorkScheduling(config, log) if config.getvalue("dist") == "loadfile" else None


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from running_stack(tmp_path_factory.mktemp("stack"), "integration")


@pytest.fixture(scope="session")
def stack(local_stack: LocalStack) -> StackInfo:
    assert local_stack.info is not None
    return local_stack.info


@pytest.fixture(scope="session")
def clusters(stack: StackInfo) -> dict[str, client.ApiClient]:
    return admin_clients(stack)


@dataclass(frozen=True)
class TwinNamespace:
    name: str
    clusters: dict[str, client.ApiClient]

    def core(self, cluster: str) -> client.CoreV1Api:
        return client.CoreV1Api(self.clusters[cluster])


@pytest.fixture
def namespace(
    clusters: dict[str, client.ApiClient], request: pytest.FixtureRequest
) -> Iterator[TwinNamespace]:
    """A fresh namespace of the same name in both clusters, deleted after the test."""
    name = f"t-{request.node.name[:40].lower().replace('_', '-').strip('-')}-{uuid.uuid4().hex[:6]}"
    name = "".join(c for c in name if c.isalnum() or c == "-")
    for api in clusters.values():
        client.CoreV1Api(api).create_namespace(
            client.V1Namespace(
                metadata=client.V1ObjectMeta(name=name, labels={"klutch-gitops/test": "true"})
            )
        )
    yield TwinNamespace(name, clusters)
    for api in clusters.values():
        client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture(scope="module")
def oidc(stack: StackInfo) -> Iterator[httpx.Client]:
    """An HTTP client that trusts the stack's Dex."""
    with httpx.Client(verify=ssl.create_default_context(cafile=stack.dex.ca), timeout=10.0) as http:
        yield http


@pytest.fixture(scope="module")
def discovery(oidc: httpx.Client, stack: StackInfo) -> dict:
    response = oidc.get(f"{stack.dex.issuer}/.well-known/openid-configuration")
    response.raise_for_status()
    return response.json()


@pytest.fixture(scope="session")
def git_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    """A real HTTPS Git server for tenant repositories (tenants get no file://); git in this
    process and its children trusts its CA through GIT_SSL_CAINFO, as a reconciler trusts a
    private forge's CA in production."""
    with (
        running_git_server(tmp_path_factory.mktemp("forge")) as server,
        pytest.MonkeyPatch.context() as patch,
    ):
        patch.setenv("GIT_SSL_CAINFO", str(server.ca_file))
        yield server


@pytest.fixture
def cleanup() -> Iterator[list[Callable[[], Any]]]:
    """Things to undo after the test, last first (stopping reconcilers, killing processes)."""
    undo: list[Callable[[], Any]] = []
    yield undo
    for step in reversed(undo):
        step()


# Tiers a run takes only when its -m expression names them (`make kind-test`, `make
# runtimes-test`): they need what CI and these machines lack (a Docker daemon) or minutes the
# default tier keeps for promises no other test covers. Left out, not skipped.
OPT_IN_TIERS = ("kind", "runtimes")
TIERS = ("unit", "integration", "chaos", "security", *OPT_IN_TIERS)
TESTS = Path(__file__).resolve().parent


def tier_of(path: Path, tests: Path = TESTS) -> str | None:
    """The tier of a test file: its first folder under ``tests``, however deep the file sits
    (tests/unit mirrors the code in sub-folders); None for a folder that is no tier (peers)."""
    path = path.resolve()
    if not path.is_relative_to(tests):
        return None
    folders = path.relative_to(tests).parts[:-1]
    return folders[0] if folders and folders[0] in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers = {item: tier_of(item.path) for item in items}
    for item, tier in tiers.items():
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))
    asked = config.option.markexpr or ""
    left_out = [item for item, tier in tiers.items() if tier in OPT_IN_TIERS and tier not in asked]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item not in left_out]


@pytest.fixture
def env(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    tmp_path: Path,
    cleanup: list[Callable[[], Any]],
    request: pytest.FixtureRequest,
) -> Env:
    """An integration test's stack, clusters, directory, undo list and Git server in one
    (tests/env.py)."""
    return Env(stack, clusters, tmp_path, cleanup, request)
