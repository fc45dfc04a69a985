"""A local stack of the chaos tier's own, whose processes the tests kill and start again.

Never the integration tier's stack: a killed etcd or kube-apiserver would fail tests that did not
ask for it. The stack lives as long as this package's tests (``scope="package"``), so in a run of
every tier it is gone again before the integration tier starts its own.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from klutch_gitops.dev.localstack.pki import Pki
from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo
from tests.kit.tenant import Tenant, make_tenant
from tests.stack import admin_clients, running_stack

from .harness import ReconcilerProcess, config_for

READY_TIMEOUT = 180.0  # a kube-apiserver restart on a busy 2-core machine


@pytest.fixture(scope="package")
def chaos_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    yield from running_stack(tmp_path_factory.mktemp("chaos-stack"), "chaos")


@pytest.fixture(scope="package")
def stack(chaos_stack: LocalStack) -> StackInfo:
    assert chaos_stack.info is not None
    return chaos_stack.info


@pytest.fixture(scope="package")
def clusters(stack: StackInfo) -> dict[str, client.ApiClient]:
    return admin_clients(stack)


class Faults:
    """Kill a stack process (SIGKILL) and start it again with the same command, ports and data,
    waiting until it serves again. ``heal`` starts whatever a test left down."""

    def __init__(self, stack: LocalStack) -> None:
        assert stack.info is not None
        self.stack = stack
        self.info = stack.info
        pki = Pki(Path(self.info.pki))
        self.tls = ssl.create_default_context(cafile=str(pki.serving_ca))
        self.tls.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
        self.down: set[str] = set()

    def kill(self, name: str) -> None:
        self.stack.process(name).kill()
        self.down.add(name)

    def start(self, name: str) -> None:
        process = self.stack.process(name)
        process.start()
        process.wait_until(lambda: self._serves(name), "serving again", READY_TIMEOUT)
        self.down.discard(name)

    def heal(self) -> None:
        for name in sorted(self.down):
            self.start(name)
        dead = [p.name for p in self.stack.processes if not p.running]
        assert not dead, f"stack processes died of the faults: {dead}"

    def _serves(self, name: str) -> bool:
        if name == "etcd":  # and the kube-apiservers see it again
            return self._ok(f"{self.info.etcd}/health") and all(
                self._serves(f"kube-apiserver-{cluster}") for cluster in self.info.clusters
            )
        if name.startswith("kube-apiserver-"):
            cluster = self.info.clusters[name.removeprefix("kube-apiserver-")]
            return self._ok(f"{cluster.url}/readyz")
        if name == "dex":
            return self._ok(f"{self.info.dex.issuer}/.well-known/openid-configuration")
        raise ValueError(f"no readiness check for {name}")

    def _ok(self, url: str) -> bool:
        try:
            return httpx.get(url, verify=self.tls, timeout=5).status_code == 200
        except httpx.HTTPError:
            return False


@pytest.fixture
def faults(chaos_stack: LocalStack) -> Iterator[Faults]:
    """Kill and restart stack processes; the next test gets them all serving again."""
    made = Faults(chaos_stack)
    yield made
    made.heal()


@pytest.fixture
def tenant(stack: StackInfo, clusters: dict[str, client.ApiClient], tmp_path: Path) -> Tenant:
    """A bound consumer, an App namespace, a bare remote and a person's clone (make_tenant's);
    the reconciler is the ``reconciler`` fixture's process, not the in-process one."""
    return make_tenant(stack, clusters, tmp_path, start=False)


@pytest.fixture
def reconciler(tenant: Tenant, tmp_path: Path) -> Iterator[ReconcilerProcess]:
    """The tenant's reconciler as a child process, not started; killed after the test."""
    process = ReconcilerProcess(tmp_path / "reconciler", config_for(tenant))
    yield process
    process.kill()
