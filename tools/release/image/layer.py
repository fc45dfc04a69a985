"""One reproducible layer: a root filesystem as a sorted, gzip-compressed tar.

Reproducible as reproducible-builds.org describes for archives: entries in byte order of their
paths, mtimes clamped to SOURCE_DATE_EPOCH, numeric owners kept and names dropped (a runtime
extracts by number; the build host's user names mean nothing in the image), gzip without a name
or timestamp. The layer's digest (compressed) and diff_id (uncompressed) are hashed as it is
written, as the OCI image-spec's manifest.md and config.md (``rootfs.diff_ids``) define them.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# Directories kept empty: a runtime mounts its own /dev, /proc, /sys, and /tmp starts empty.
EMPTIED = frozenset({"dev", "proc", "sys", "tmp"})
GZIP_LEVEL = 6  # zlib's default: most of level 9's size at a fraction of its time


class _Hashing:
    """A write-only stream that hashes and counts what passes through to ``sink``."""

    def __init__(self, sink: BinaryIO) -> None:
        self.sink = sink
        self.sha256 = hashlib.sha256()
        self.size = 0

    def write(self, data: bytes) -> int:
        self.sha256.update(data)
        self.size += len(data)
        self.sink.write(data)
        return len(data)

    def flush(self) -> None:
        self.sink.flush()


@dataclass(frozen=True)
class Layer:
    digest: str  # sha256:… of the gzip stream (the blob's name)
    diff_id: str  # sha256:… of the uncompressed tar
    size: int  # bytes of the gzip stream
    entries: int


def walk(root: Path, relative: str = "") -> Iterator[tuple[str, str]]:
    """(path on disk, path in the layer) of everything under ``root``, parents first, siblings
    in byte order; the contents of EMPTIED are left out."""
    with os.scandir(root / relative if relative else root) as scan:
        children = sorted(scan, key=lambda e: os.fsencode(e.name))
    for entry in children:
        name = f"{relative}{entry.name}"
        yield entry.path, name
        if entry.is_dir(follow_symlinks=False) and name not in EMPTIED:
            yield from walk(root, name + "/")


def write_layer(root: Path, out: BinaryIO, epoch: int) -> Layer:
    """Writes ``root`` as a layer to ``out``."""
    compressed = _Hashing(out)
    entries = 0
    with gzip.GzipFile(
        filename="", mode="wb", fileobj=compressed, compresslevel=GZIP_LEVEL, mtime=0
    ) as zipped:
        uncompressed = _Hashing(zipped)  # type: ignore[arg-type]
        with tarfile.open(fileobj=uncompressed, mode="w|", format=tarfile.PAX_FORMAT) as tar:  # type: ignore[call-overload]
            for path, name in walk(root):
                info = tar.gettarinfo(path, arcname=name)
                if info is None:  # a socket: nothing a layer can hold
                    continue
                info.uname = info.gname = ""
                info.mtime = min(int(info.mtime), epoch)
                if info.isreg():
                    with open(path, "rb") as content:
                        tar.addfile(info, content)
                else:
                    tar.addfile(info)
                entries += 1
    return Layer(
        digest=f"sha256:{compressed.sha256.hexdigest()}",
        diff_id=f"sha256:{uncompressed.sha256.hexdigest()}",
        size=compressed.size,
        entries=entries,
    )
