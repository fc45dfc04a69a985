"""The OCI image layout: ``oci-layout``, ``index.json`` and ``blobs/sha256/…``.

Written as opencontainers/image-spec defines it: image-layout.md (the directory, index.json as the
entry point, blobs named by their digest), manifest.md (schemaVersion 2, the config and layer
descriptors), config.md (architecture, os, config.User/Env/Entrypoint/Cmd/ExposedPorts/Labels,
rootfs.diff_ids) and annotations.md (``org.opencontainers.image.ref.name`` on the index's
descriptor is the tag ``skopeo copy oci:DIR:TAG`` finds). No Python library on PyPI that is kept
up does this (``opencontainers`` 0.0.15 and ``pyoci`` 0.2 are young or idle), and the format is
three JSON documents and a tar, so it is written here with the standard library.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tools.release.image import spec
from tools.release.image.layer import Layer, write_layer

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
# The name containerd (and so ``kind load image-archive``) gives an imported image; Docker's own
# ``docker save`` writes it beside ref.name (containerd core/images/archive/importer.go).
CONTAINERD_NAME = "io.containerd.image.name"
REF_NAME = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Image:
    reference: str  # registry/repository:tag
    manifest_digest: str
    config_digest: str
    layer: Layer


def canonical(document: dict[str, object]) -> bytes:
    """JSON with sorted keys and no spaces: the same document always has the same digest."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def put_blob(layout: Path, data: bytes, media_type: str) -> dict[str, object]:
    """Stores ``data`` under its digest; returns its descriptor (descriptor.md)."""
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def created(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def image_config(layer: Layer, platform: spec.Platform, epoch: int) -> dict[str, object]:
    """The image configuration (config.md): how a runtime starts the root filesystem."""
    return {
        "created": created(epoch),
        "architecture": platform.oci,
        "os": "linux",
        "config": {
            "User": spec.USER,
            "Env": list(spec.ENV),
            "Entrypoint": list(spec.ENTRYPOINT),
            "Cmd": list(spec.CMD),
            "ExposedPorts": {f"{port}/tcp": {} for port in spec.PORTS},
            "Labels": spec.labels(spec.project_version(), spec.revision(), created(epoch)),
        },
        "rootfs": {"type": "layers", "diff_ids": [layer.diff_id]},
        "history": [
            {
                "created": created(epoch),
                "created_by": (
                    f"mmdebstrap --variant={spec.VARIANT} {spec.SUITE} + install.sh "
                    "(python -m tools.release.image build)"
                ),
            }
        ],
    }


def write_layout(
    root: Path, out: Path, reference: str, platform: spec.Platform, epoch: int
) -> Image:
    """Writes the image of the root filesystem ``root`` as an OCI image layout in ``out``."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    partial = blobs / "layer.partial"
    with partial.open("wb") as stream:
        layer = write_layer(root, stream, epoch)
    partial.replace(blobs / layer.digest.removeprefix("sha256:"))
    config = put_blob(out, canonical(image_config(layer, platform, epoch)), CONFIG)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": config,
        "layers": [{"mediaType": LAYER, "digest": layer.digest, "size": layer.size}],
    }
    descriptor = put_blob(out, canonical(manifest), MANIFEST)
    descriptor["platform"] = {"architecture": platform.oci, "os": "linux"}
    descriptor["annotations"] = {
        CONTAINERD_NAME: reference,
        REF_NAME: reference.rpartition(":")[2],
    }
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json"}
    index["manifests"] = [descriptor]
    (out / "index.json").write_bytes(canonical(index))
    (out / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))
    return Image(reference, str(descriptor["digest"]), str(config["digest"]), layer)


def write_archive(layout: Path, image: Image, archive: Path, epoch: int) -> None:
    """The layout as one tar plus Docker's ``manifest.json`` naming the tag: what ``docker save``
    writes since Docker 25, so ``docker load`` and ``kind load image-archive`` (containerd's
    importer, which prefers the OCI layout and keeps the index's names) both take it."""
    docker_manifest = [
        {
            "Config": f"blobs/sha256/{image.config_digest.removeprefix('sha256:')}",
            "RepoTags": [image.reference],
            "Layers": [f"blobs/sha256/{image.layer.digest.removeprefix('sha256:')}"],
        }
    ]
    files = sorted(p for p in layout.rglob("*") if p.is_file() and not p.name.endswith(".partial"))
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for path in files:
            info = tarfile.TarInfo(path.relative_to(layout).as_posix())
            info.size, info.mode, info.mtime = path.stat().st_size, 0o644, epoch
            with path.open("rb") as content:
                tar.addfile(info, content)
        data = json.dumps(docker_manifest).encode()
        info = tarfile.TarInfo("manifest.json")
        info.size, info.mode, info.mtime = len(data), 0o644, epoch
        tar.addfile(info, io.BytesIO(data))
