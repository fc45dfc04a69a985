"""The session's real Flux and Argo CD: each started once, by the first test that asks for
``flux`` or ``argocd``, against the session stack's App Cluster, and stopped at the end of the
run. When a test that uses one fails, its controllers' last log lines are added to its report."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client

from klutch_gitops.dev.localstack.stack import StackInfo
from tests.gitserver import GitServer
from tests.kit.flux import FluxPeer, start_flux, stop_flux

from .argocd import VERSION, ArgoPeer, start_argocd, stop_argocd


@pytest.fixture(scope="session")
def flux(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    git_server: GitServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[FluxPeer]:
    started = time.monotonic()
    peer = start_flux(
        clusters["app"],
        stack.clusters["app"].kubeconfig,
        git_server,
        tmp_path_factory.mktemp("flux"),
    )
    print(f"Flux CRDs installed and both controllers ready in {time.monotonic() - started:.1f} s")
    yield peer
    stop_flux(peer)


@pytest.fixture(scope="session")
def argocd(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    git_server: GitServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ArgoPeer]:
    started = time.monotonic()
    peer = start_argocd(
        clusters["app"],
        stack.clusters["app"].kubeconfig,
        git_server,
        tmp_path_factory.mktemp("argocd"),
    )
    print(f"Argo CD {VERSION} started in {time.monotonic() - started:.1f} s")
    yield peer
    stop_argocd(peer)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    report = yield
    funcargs = getattr(item, "funcargs", {})
    for name, kind in (("flux", FluxPeer), ("argocd", ArgoPeer)):
        peer = funcargs.get(name)
        if report.failed and isinstance(peer, kind):
            report.sections.append((f"{name} controllers' logs", peer.tails()))
    return report
