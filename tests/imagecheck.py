"""The daemonless image as a runtime and a registry client see it, shared by the default tier's
image test (tests/integration/test_image.py) and the runtimes tier (tests/runtimes).

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
import time
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tools.release.image import build, spec, wheels

VERSION = tomllib.loads((spec.ROOT / "pyproject.toml").read_text())["project"]["version"]


@dataclass(frozen=True)
class Builds:
    layout: Path
    archive: Path
    first: build.Built


@contextmanager
def built_image(tmp_path: Path, *, twice: bool) -> Iterator[Builds]:
    """The image built from one copy of the sources and one epoch (others may edit and commit
    in the checkout meanwhile), timed; ``twice`` builds it again from the cached base and checks
    the layer is the same bytes."""
    tree = tmp_path / "tree"
    shutil.copytree(spec.ROOT, tree, ignore=wheels.NOT_COPIED, symlinks=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SOURCE_DATE_EPOCH", str(spec.source_date_epoch()))
        started = time.monotonic()
        first = build.build(tmp_path / "layout", archive=tmp_path / "image.tar", tree=tree)
        seconds = [time.monotonic() - started]
        second = None
        if twice:
            started = time.monotonic()
            second = build.build(tmp_path / "again", tree=tree)
            seconds.append(time.monotonic() - started)
    base = "made by mmdebstrap" if first.base_made else "cached"
    print(f"\nimage build: {' then '.join(f'{s:.0f}s' for s in seconds)} (base {base})")
    for step, took in first.seconds.items():
        print(f"  {step:<36} {took:6.1f}s")
    layer = first.image.layer
    print(f"  layer {layer.size / 2**20:.0f} MiB gzip, {layer.entries} entries")
    if second is not None:
        assert not second.base_made
        assert second.image.layer == first.image.layer  # reproducible: digests, size, entries
    yield Builds(tmp_path / "layout", tmp_path / "image.tar", first)
    shutil.rmtree(tmp_path)  # half a GiB; pytest keeps the last three runs' temporary folders


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
