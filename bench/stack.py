"""The benchmarks' own local stack, stopped on exit, Ctrl-C and SIGTERM alike, and children that
die with the benchmark."""

from __future__ import annotations

import ctypes
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo
from klutch_gitops.kube.client import Kube, api_client
from klutch_gitops.kube.crds import install_crds, load_crds
from tests.kit.claims import CLAIM_CRDS

PR_SET_PDEATHSIG = 1


@dataclass
class Clusters:
    """Admin access to both clusters of a running stack."""

    info: StackInfo
    app: Kube
    control_plane: Kube
    pids: dict[str, int]  # the stack's processes by name, to read their CPU

    def kubeconfig(self, cluster: str) -> Path:
        return Path(self.info.clusters[cluster].kubeconfig)

    @property
    def apis(self) -> dict[str, client.ApiClient]:
        """The API clients by cluster name, as the test kit's make_tenant takes them."""
        return {"app": self.app.api, "control-plane": self.control_plane.api}


@contextmanager
def running_stack(state_dir: Path) -> Iterator[Clusters]:
    """A dedicated stack for one run, stopped on exit, Ctrl-C and SIGTERM alike; the Control
    Plane serves the CRDs, so tenants are made without installing them again."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    stack = LocalStack(state_dir)
    try:
        info = stack.start()
        clusters = Clusters(
            info,
            Kube(api_client(Path(info.clusters["app"].kubeconfig))),
            Kube(api_client(Path(info.clusters["control-plane"].kubeconfig))),
            {p.name: p.popen.pid for p in stack.processes if p.popen is not None},
        )
        install_crds(clusters.control_plane.api, load_crds(cluster="control-plane") + CLAIM_CRDS)
        yield clusters
    finally:
        stack.stop()
        signal.signal(signal.SIGTERM, previous)


def _interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def die_with_parent() -> None:
    """``preexec_fn`` for children that must not outlive the benchmark."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
