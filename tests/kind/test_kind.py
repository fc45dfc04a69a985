"""The README's kind path, for real: ``tools/kind/up.sh`` creates a kind cluster as the Control
Plane, loads the image (built with ``docker build``, or the daemonless build's archive), installs
the chart with it and waits for both Deployments; the test then checks them and the version the
running image prints, and ``tools/kind/down.sh`` deletes the cluster.

Runs only with ``-m kind`` where ``docker info`` succeeds and ``kind`` is on PATH. ``kind load
image-archive`` hands the archive to containerd's importer on the node (kubernetes-sigs/kind
pkg/cluster/nodeutils, containerd core/images/archive/importer.go), which reads the OCI layout
and the names on index.json that ``write_archive`` sets.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.errors import KlutchError
from tools.release.image import build, spec

TOOLS = spec.ROOT / "tools" / "kind"
VERSION = tomllib.loads((spec.ROOT / "pyproject.toml").read_text())["project"]["version"]
CLUSTER = "klutch-gitops-test"
NAMESPACE = "klutch-system"
RELEASE = "klutch-gitops"


def docker_runs() -> bool:
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info"], capture_output=True, check=False).returncode == 0


pytestmark = [
    pytest.mark.kind,
    pytest.mark.timeout(1800),  # a kind node image pull and a docker build on a cold machine
    pytest.mark.skipif(
        not (shutil.which("kind") and docker_runs()), reason="needs a Docker daemon and kind"
    ),
]


@pytest.fixture
def kind_env() -> Iterator[dict[str, str]]:
    """The scripts' environment: helm and kubectl from `make bins` when not on PATH; the
    cluster is deleted afterwards whatever happened."""
    env = {**os.environ, "KIND_CLUSTER": CLUSTER, "KLUTCH_NAMESPACE": NAMESPACE}
    try:
        found = binaries.require("kubectl", "helm")
        env["PATH"] = os.pathsep.join([*(str(p.parent) for p in found.values()), env["PATH"]])
    except KlutchError:
        pass  # then they must be on PATH; up.sh says which is missing
    yield env
    subprocess.run([str(TOOLS / "down.sh")], env=env, check=False)


def kubectl(env: dict[str, str], *args: str) -> str:
    command = ["kubectl", "--context", f"kind-{CLUSTER}", "-n", NAMESPACE, *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True).stdout


def check_both_services(env: dict[str, str]) -> None:
    deployments = json.loads(
        kubectl(
            env, "get", "deployments", "-l", f"app.kubernetes.io/instance={RELEASE}", "-o", "json"
        )
    )["items"]
    ready = {d["metadata"]["name"]: d["status"].get("readyReplicas", 0) for d in deployments}
    print(f"\nDeployments: {ready}")
    assert len(deployments) == 2
    assert all(count >= 1 for count in ready.values())
    reconciler = next(name for name in ready if name.endswith("reconciler"))
    printed = kubectl(env, "exec", f"deployment/{reconciler}", "--", "klutch-gitops", "version")
    assert printed.split()[-1] == VERSION


def test_up_with_docker_build(kind_env: dict[str, str]) -> None:
    result = subprocess.run([str(TOOLS / "up.sh")], env=kind_env, check=False)
    assert result.returncode == 0
    check_both_services(kind_env)


def test_up_with_the_daemonless_archive(kind_env: dict[str, str], tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("the daemonless build needs root on Debian or Ubuntu")
    build.build(tmp_path / "layout", archive=tmp_path / "image.tar")
    env = {**kind_env, "KLUTCH_IMAGE_ARCHIVE": str(tmp_path / "image.tar")}
    result = subprocess.run([str(TOOLS / "up.sh")], env=env, check=False)
    assert result.returncode == 0
    check_both_services(env)
