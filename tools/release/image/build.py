"""The daemonless build: base root filesystem → project installed under chroot → OCI layout."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from klutch_gitops.errors import KlutchError
from tools.release.image import rootfs, spec, wheels
from tools.release.image.layout import Image, write_archive, write_layout

STAGING = "tmp/klutch-image"  # inside the root filesystem; /tmp is left out of the layer
# Runs install.sh in the root filesystem: a mount namespace of its own (the mounts vanish with
# it) and no network, so the install can only use the staged wheels.
INSTALL = (
    'mount --rbind /dev "$1/dev" && mount -t proc proc "$1/proc" && '
    'exec chroot "$1" /bin/sh /{staging}/install.sh /{staging}/wheels /{staging}/requirements.lock'
)


@dataclass
class Built:
    image: Image
    layout: Path
    base: Path
    base_made: bool  # False: the cached base root filesystem was reused
    seconds: dict[str, float] = field(default_factory=dict)


@contextmanager
def timed(seconds: dict[str, float], step: str, on_step: Callable[[str], None]) -> Iterator[None]:
    on_step(step)
    started = time.monotonic()
    yield
    seconds[step] = time.monotonic() - started


def prepare_out(out: Path) -> None:
    """An empty directory for the layout; a previous layout there is replaced, anything else is
    refused rather than deleted."""
    if out.exists() and not out.is_dir():
        raise KlutchError(f"--out {out} is a file", "pass --out a new or empty directory")
    if out.exists() and any(out.iterdir()):
        if not (out / "oci-layout").is_file():
            raise KlutchError(
                f"{out} exists and is not an OCI image layout",
                "pass --out a new or empty directory (a previous layout there is replaced)",
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)


def rootfs_python(root: Path) -> str:
    """The root filesystem's Python as ``3.11``, from Debian's ``/usr/bin/python3`` link."""
    target = os.readlink(root / "usr/bin/python3")
    version = target.removeprefix("python")
    if not version.replace(".", "").isdigit():
        raise KlutchError(f"/usr/bin/python3 in the base points at {target!r}", "check the suite")
    return version


def install(root: Path, scratch: Path, tree: Path, platform: spec.Platform, epoch: int) -> None:
    """Stages the wheels, the lock and install.sh in the root filesystem and runs install.sh."""
    staging = root / STAGING
    shutil.copytree(wheels.locked_wheels(rootfs_python(root), platform), staging / "wheels")
    wheels.project_wheel(staging / "wheels", scratch, tree)
    shutil.copy2(spec.LOCK_FILE, staging / "requirements.lock")
    shutil.copy2(spec.INSTALL_SCRIPT, staging / "install.sh")
    env = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PIP_NO_CACHE_DIR": "1",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        # py_compile then writes hash-checked .pyc files, free of the install's time.
        "SOURCE_DATE_EPOCH": str(epoch),
    }
    script = INSTALL.format(staging=STAGING)
    command = ["unshare", "--mount", "--net", "--fork", "sh", "-c", script, "sh", str(root)]
    rootfs.run(command, "install.sh in the root filesystem", env=env)
    shutil.rmtree(staging)


def build(
    out: Path,
    *,
    reference: str | None = None,
    archive: Path | None = None,
    refresh: bool = False,
    tree: Path = spec.ROOT,
    on_step: Callable[[str], None] = lambda step: None,
) -> Built:
    """Builds the image into the OCI image layout ``out`` (and ``archive``, if given), with the
    project's wheel built from ``tree`` (the checkout; a copy of it, to hold it still)."""
    if os.geteuid() != 0:
        raise KlutchError(
            "the daemonless image build runs mmdebstrap and chroot, which need root",
            "run it as root (CI, a VM), or build with the Dockerfile: docker build .",
        )
    platform = spec.Platform.host()
    epoch = spec.source_date_epoch()
    reference = reference or f"{spec.REGISTRY_REPOSITORY}:{spec.project_version()}"
    if ":" not in reference.rpartition("/")[2]:
        raise KlutchError(f"--tag {reference!r} has no tag", "write it as REGISTRY/NAME:TAG")
    prepare_out(out)
    seconds: dict[str, float] = {}
    with timed(seconds, "base root filesystem (mmdebstrap)", on_step):
        base, made = rootfs.base_tarball(platform, refresh=refresh)
    rootfs.cache_root().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=rootfs.cache_root(), prefix="build-") as scratch:
        root = Path(scratch) / "rootfs"
        with timed(seconds, "unpack the base", on_step):
            rootfs.extract(base, root)
        with timed(seconds, "wheels and install (chroot)", on_step):
            install(root, Path(scratch), tree, platform, epoch)
        with timed(seconds, "layer and OCI layout", on_step):
            image = write_layout(root, out, reference, platform, epoch)
    if archive is not None:
        with timed(seconds, "archive", on_step):
            write_archive(out, image, archive, epoch)
    return Built(image, out, base, made, seconds)
