"""The daemonless image build, end to end: ``klutch-gitops dev image build`` makes the Debian root
filesystem with mmdebstrap (installing mmdebstrap first when missing; cached after the first
build), installs the wheels under chroot and writes an OCI image layout; the test then starts the
image as a runtime would and checks the layout as a registry client would.

The runtime's part follows opencontainers/image-spec layer.md ("Applying Changesets": unpack the
layers in order) and config.md (run ``Entrypoint`` + ``Cmd`` as ``User`` with ``Env``); the
layout's follows image-layout.md (index.json → manifest → config and layers, each blob's sha256
equal to its name, each descriptor's size equal to the blob's) and config.md (``rootfs.diff_ids``
are the digests of the uncompressed layers).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from klutch_gitops.dev.image import build, rootfs, runtime, spec, wheels

VERSION = tomllib.loads((spec.ROOT / "pyproject.toml").read_text())["project"]["version"]
# What the image must hold beyond `version`: the server extra and the catalog the reconciler
# applies at start (package data of the wheel).
SERVER_CHECK = (
    "import os; assert (os.getuid(), os.getgid()) == (10001, 10001), os.getuid(); "
    "import fastapi, uvicorn, psycopg, git, watchfiles, jinja2, prometheus_client; "
    "from klutch_gitops.catalog import CATALOG_DIR; "
    "assert (CATALOG_DIR / 'crds').is_dir(), CATALOG_DIR; print('server ok')"
)


def checked_blob(layout: Path, descriptor: dict[str, Any]) -> bytes:
    """The blob a descriptor names, after checking its digest and size against the descriptor."""
    algorithm, encoded = descriptor["digest"].split(":")
    assert algorithm == "sha256"
    data = (layout / "blobs" / "sha256" / encoded).read_bytes()
    assert hashlib.sha256(data).hexdigest() == encoded
    assert len(data) == descriptor["size"], descriptor
    return data


def check_layout(layout: Path) -> dict[str, Any]:
    """Every blob is named by its content; index → manifest → config and layer agree."""
    for path in (layout / "blobs" / "sha256").iterdir():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name
    assert json.loads((layout / "oci-layout").read_text())["imageLayoutVersion"] == "1.0.0"
    [descriptor] = json.loads((layout / "index.json").read_text())["manifests"]
    assert descriptor["annotations"]["org.opencontainers.image.ref.name"] == VERSION
    manifest = json.loads(checked_blob(layout, descriptor))
    config = json.loads(checked_blob(layout, manifest["config"]))
    diff_ids = [
        "sha256:" + hashlib.sha256(gzip.decompress(checked_blob(layout, layer))).hexdigest()
        for layer in manifest["layers"]
    ]
    assert config["rootfs"] == {"type": "layers", "diff_ids": diff_ids}
    return config


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


@dataclass(frozen=True)
class Builds:
    layout: Path
    archive: Path
    first: build.Built


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Builds]:
    """The image built twice (the second with the cached base), timed; both from one copy of
    the sources and one epoch, since others may edit and commit in the checkout meanwhile."""
    tmp_path = tmp_path_factory.mktemp("image")
    tree = tmp_path / "tree"
    shutil.copytree(spec.ROOT, tree, ignore=wheels.NOT_COPIED, symlinks=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SOURCE_DATE_EPOCH", str(spec.source_date_epoch()))
        started = time.monotonic()
        first = build.build(tmp_path / "layout", archive=tmp_path / "image.tar", tree=tree)
        first_seconds = time.monotonic() - started
        started = time.monotonic()
        second = build.build(tmp_path / "again", tree=tree)
        second_seconds = time.monotonic() - started
    base = "made by mmdebstrap" if first.base_made else "cached"
    print(f"\nimage build: first {first_seconds:.0f}s (base {base}), second {second_seconds:.0f}s")
    for step, seconds in first.seconds.items():
        print(f"  {step:<36} {seconds:6.1f}s / {second.seconds.get(step, 0):6.1f}s")
    layer = first.image.layer
    print(f"  layer {layer.size / 2**20:.0f} MiB gzip, {layer.entries} entries")
    assert not second.base_made
    assert second.image.layer == first.image.layer  # reproducible: digests, size, entries
    yield Builds(tmp_path / "layout", tmp_path / "image.tar", first)
    shutil.rmtree(tmp_path)  # half a GiB; pytest keeps the last three runs' temporary folders


@pytest.mark.timeout(1500)  # a cold build: mmdebstrap and every wheel downloaded, then twice
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
