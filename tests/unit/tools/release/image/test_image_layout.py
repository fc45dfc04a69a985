"""The OCI image layout the daemonless build writes, on a small root filesystem: what
opencontainers/image-spec asks (image-layout.md: oci-layout, index.json, blobs named by their
sha256; manifest.md: config and layer descriptors with digest and size; config.md: the
rootfs.diff_ids are the uncompressed layers' digests) and a layer that is the same bytes every
time (sorted, mtimes clamped, no owner names)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path
from typing import Any

import pytest

from klutch_gitops.errors import KlutchError
from tools.release.image import build, spec
from tools.release.image.layout import write_archive, write_layout

pytestmark = pytest.mark.unit

EPOCH = 1_700_000_000
AMD64 = spec.Platform("amd64", "amd64", "x86_64")
REFERENCE = "registry.example.com/team/klutch-gitops:1.2.3"


def small_root(root: Path) -> Path:
    for directory in ("usr/bin", "etc", "tmp", "dev", "opt/klutch-gitops/bin"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    (root / "usr/bin/tool").write_text("#!/bin/sh\necho tool\n")
    (root / "usr/bin/tool").chmod(0o755)
    os.link(root / "usr/bin/tool", root / "usr/bin/tool-again")
    (root / "usr/bin/python3").symlink_to("python3.11")
    (root / "etc/passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (root / "tmp/left-over").write_text("not in the image")
    (root / "dev/null-ish").write_text("not in the image")
    (root / "opt/klutch-gitops/bin/klutch-gitops").write_text("#!/usr/bin/python3\n")
    return root


def blob(layout: Path, digest: str) -> bytes:
    data = (layout / "blobs" / digest.replace(":", "/", 1)).read_bytes()
    assert "sha256:" + hashlib.sha256(data).hexdigest() == digest
    return data


def read_layout(layout: Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], bytes]:
    """index, manifest, config and the layer, each checked against its descriptor."""
    assert json.loads((layout / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads((layout / "index.json").read_text())
    [descriptor] = index["manifests"]
    manifest_bytes = blob(layout, descriptor["digest"])
    assert len(manifest_bytes) == descriptor["size"]
    manifest = json.loads(manifest_bytes)
    config_bytes = blob(layout, manifest["config"]["digest"])
    assert len(config_bytes) == manifest["config"]["size"]
    [layer_descriptor] = manifest["layers"]
    layer = blob(layout, layer_descriptor["digest"])
    assert len(layer) == layer_descriptor["size"]
    return index, manifest, json.loads(config_bytes), layer


def test_the_layout_is_what_the_image_spec_describes(tmp_path: Path) -> None:
    root = small_root(tmp_path / "rootfs")
    image = write_layout(root, tmp_path / "layout", REFERENCE, AMD64, EPOCH)
    index, manifest, config, layer = read_layout(tmp_path / "layout")
    assert index["manifests"][0]["digest"] == image.manifest_digest
    assert index["manifests"][0]["annotations"] == {
        "io.containerd.image.name": REFERENCE,
        "org.opencontainers.image.ref.name": "1.2.3",
    }
    assert manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+gzip"
    uncompressed = gzip.decompress(layer)
    assert config["rootfs"] == {
        "type": "layers",
        "diff_ids": ["sha256:" + hashlib.sha256(uncompressed).hexdigest()],
    }
    assert (config["architecture"], config["os"]) == ("amd64", "linux")
    assert config["config"]["Entrypoint"] == ["/usr/bin/tini", "--", "klutch-gitops"]
    assert config["config"]["User"] == "10001"
    assert config["config"]["ExposedPorts"] == {"8080/tcp": {}, "8443/tcp": {}}
    assert config["config"]["Labels"]["org.opencontainers.image.version"] == spec.project_version()
    assert config["created"] == "2023-11-14T22:13:20Z"


def test_the_layer_is_sorted_clamped_and_keeps_numeric_owners(tmp_path: Path) -> None:
    root = small_root(tmp_path / "rootfs")
    write_layout(root, tmp_path / "layout", REFERENCE, AMD64, EPOCH)
    *_, layer = read_layout(tmp_path / "layout")
    with tarfile.open(fileobj=io.BytesIO(layer), mode="r:gz") as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names, key=lambda n: n.split("/"))  # parents first, byte order
    assert "tmp" in names
    assert "dev" in names
    assert not any(n.startswith(("tmp/", "dev/")) for n in names)
    by_name = {m.name: m for m in members}
    assert by_name["usr/bin/tool-again"].islnk()
    assert by_name["usr/bin/tool-again"].linkname == "usr/bin/tool"
    assert by_name["usr/bin/python3"].issym()
    assert by_name["usr/bin/tool"].mode == 0o755
    for member in members:
        assert member.mtime <= EPOCH
        assert (member.uname, member.gname) == ("", "")
        on_disk = os.lstat(root / member.name)
        assert (member.uid, member.gid) == (on_disk.st_uid, on_disk.st_gid)


def test_the_same_root_gives_the_same_digests(tmp_path: Path) -> None:
    root = small_root(tmp_path / "rootfs")
    first = write_layout(root, tmp_path / "one", REFERENCE, AMD64, EPOCH)
    os.utime(root / "usr/bin/tool")  # touched now: after the epoch, so clamped to it
    second = write_layout(root, tmp_path / "two", REFERENCE, AMD64, EPOCH)
    assert second.manifest_digest == first.manifest_digest
    assert second.layer.diff_id == first.layer.diff_id


def test_the_archive_loads_as_oci_and_as_docker_save(tmp_path: Path) -> None:
    root = small_root(tmp_path / "rootfs")
    image = write_layout(root, tmp_path / "layout", REFERENCE, AMD64, EPOCH)
    write_archive(tmp_path / "layout", image, tmp_path / "image.tar", EPOCH)
    with tarfile.open(tmp_path / "image.tar") as tar:
        names = set(tar.getnames())
        docker = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        index = json.load(tar.extractfile("index.json"))  # type: ignore[arg-type]
    assert {"oci-layout", "index.json", "manifest.json"} <= names
    [entry] = docker
    assert entry["RepoTags"] == [REFERENCE]
    assert entry["Config"] in names
    assert entry["Layers"][0] in names
    assert entry["Config"] == "blobs/" + image.config_digest.replace(":", "/")
    assert index["manifests"][0]["annotations"]["io.containerd.image.name"] == REFERENCE


def test_an_out_directory_that_is_not_a_layout_is_not_deleted(tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(KlutchError, match="is not an OCI image layout"):
        build.prepare_out(tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").exists()
    with pytest.raises(KlutchError, match="is a file"):
        build.prepare_out(tmp_path / "mine" / "notes.txt")
    root = small_root(tmp_path / "rootfs")
    write_layout(root, tmp_path / "layout", REFERENCE, AMD64, EPOCH)
    build.prepare_out(tmp_path / "layout")  # a previous layout is replaced
    assert list((tmp_path / "layout").iterdir()) == []
