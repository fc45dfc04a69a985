"""The daemonless image build, end to end: ``python -m tools.release.image build`` makes the
Debian root filesystem with mmdebstrap (installing mmdebstrap first when missing; cached after the
first build), installs the wheels under chroot and writes an OCI image layout; the test then starts
the image as a runtime would and checks the layout as a registry client would (tests/imagecheck.py).
Building it twice to the same bytes, containerd loading it as kind does, and the Dockerfile
building the same image run in the runtimes tier (tests/runtimes, ``make runtimes-test``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.imagecheck import VERSION, Builds, built_image, check_layout
from tools.release.image import rootfs, runtime, spec

# What the image must hold beyond `version`: the server extra and the catalog the reconciler
# applies at start (package data of the wheel).
SERVER_CHECK = (
    "import os; assert (os.getuid(), os.getgid()) == (10001, 10001), os.getuid(); "
    "import fastapi, uvicorn, psycopg, git, watchfiles, jinja2, prometheus_client; "
    "from klutch_gitops.catalog import CATALOG_DIR; "
    "assert (CATALOG_DIR / 'crds').is_dir(), CATALOG_DIR; print('server ok')"
)


def check_with_skopeo(layout: Path, manifest_digest: str, docker_archive: Path) -> None:
    """The push tool the README names reads the layout by its tag (containers/image's oci
    transport) and copies it, checking every blob it reads, into a docker-archive."""
    skopeo = rootfs.ensure_tool("skopeo", "skopeo")
    source = f"oci:{layout}:{VERSION}"
    inspected = rootfs.run([skopeo, "inspect", source], "skopeo inspect")
    assert json.loads(inspected.stdout)["Digest"] == manifest_digest
    target = f"docker-archive:{docker_archive}:{spec.REGISTRY_REPOSITORY}:{VERSION}"
    rootfs.run([skopeo, "copy", "--quiet", source, target], "skopeo copy")
    assert docker_archive.stat().st_size > 0
    docker_archive.unlink()


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Builds]:
    with built_image(tmp_path_factory.mktemp("image"), twice=False) as built:
        yield built


@pytest.mark.timeout(1500)  # a cold build: mmdebstrap and every wheel downloaded
def test_the_built_image_starts_and_prints_its_version(builds: Builds, tmp_path: Path) -> None:
    config = check_layout(builds.layout)
    assert config["config"]["Entrypoint"] == list(spec.ENTRYPOINT)
    assert config["config"]["User"] == spec.USER
    check_with_skopeo(builds.layout, builds.first.image.manifest_digest, tmp_path / "docker.tar")

    root = tmp_path / "rootfs"
    unpacked = runtime.unpack(builds.layout, root)
    result = runtime.start(root, unpacked, ["version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == VERSION
    assert (root / "opt/klutch-gitops/bin/klutch-gitops").stat().st_uid == 0  # not 10001's

    python = ["/opt/klutch-gitops/bin/python", "-c", SERVER_CHECK]
    result = runtime.start(root, unpacked, [], entrypoint=python)
    shutil.rmtree(root)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "server ok"
