"""The daemonless image in a real container runtime: built twice to the same layer bytes, then
loaded into containerd the way ``kind load image-archive`` loads it and run under runc. Opt-in
(``make runtimes-test``): it installs Debian's containerd and takes minutes the default tier
keeps for the image's own start (tests/integration/test_image.py).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.imagecheck import VERSION, Builds, built_image, check_layout
from tools.release.image import rootfs, spec


def containerd(state: Path, cleanup: list[Callable[[], Any]]) -> list[str]:
    """A containerd of this test's own (Debian's package, installed when missing) on a socket in
    ``state``; returns the ``ctr`` command line for it. Its CRI plugin is off: nothing but ctr
    talks to it."""
    binary = rootfs.ensure_tool("containerd", "containerd")
    socket = state / "containerd.sock"
    (state / "config.toml").write_text(
        f'version = 2\nroot = "{state}/root"\nstate = "{state}/state"\n'
        f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n[grpc]\n  address = "{socket}"\n'
    )
    log = (state / "containerd.log").open("wb")
    process = subprocess.Popen(
        [binary, "--config", str(state / "config.toml")], stdout=log, stderr=subprocess.STDOUT
    )

    def stop() -> None:
        process.terminate()
        process.wait(timeout=30)
        log.close()
        shutil.rmtree(state / "root", ignore_errors=True)

    cleanup.append(stop)
    ctr = ["ctr", "--address", str(socket), "--namespace=k8s.io"]
    deadline = time.monotonic() + 30
    while subprocess.run([*ctr, "version"], capture_output=True, check=False).returncode != 0:
        assert process.poll() is None, (state / "containerd.log").read_text()[-2000:]
        assert time.monotonic() < deadline, "containerd did not answer within 30s"
        time.sleep(0.2)
    return ctr


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Builds]:
    with built_image(tmp_path_factory.mktemp("image"), twice=True) as built:
        yield built


@pytest.mark.timeout(1500)
def test_containerd_loads_the_archive_as_kind_does_and_runs_it(
    builds: Builds, tmp_path_factory: pytest.TempPathFactory, cleanup: list[Callable[[], Any]]
) -> None:
    """``kind load image-archive`` pipes the archive into ``ctr --namespace=k8s.io images import
    -`` on the node (kubernetes-sigs/kind pkg/cluster/nodeutils/util.go ``LoadImageArchive``):
    the same here against Debian's containerd, then the image runs under runc, the runtime of
    kind's nodes, with its own entry point and user."""
    ctr = containerd(tmp_path_factory.mktemp("ctrd"), cleanup)
    with builds.archive.open("rb") as archive:
        subprocess.run([*ctr, "images", "import", "-"], stdin=archive, check=True, timeout=300)
    listed = subprocess.run(
        [*ctr, "images", "ls", "-q"], capture_output=True, text=True, check=True
    )
    reference = builds.first.image.reference
    assert reference in listed.stdout.split()
    config = check_layout(builds.layout)["config"]
    for name, args in (("version", ["version"]), ("user", None)):
        command = [*config["Entrypoint"], *args] if args else ["id", "-u"]
        ran = subprocess.run(
            [*ctr, "run", "--rm", reference, f"klutch-{name}", *command],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split()[-1] == (VERSION if args else spec.USER)
