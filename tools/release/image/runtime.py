"""Starting an image's entry point as a container runtime would, with tools every Linux has:
the layers unpacked into a directory (image-spec layer.md, "Applying Changesets"), then the
config's Entrypoint and Cmd run in it under chroot, as its User, with its Env only, in PID and
mount namespaces of their own (``unshare``), so tini runs as PID 1 as it does in a Pod."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from klutch_gitops.errors import KlutchError


def blob(layout: Path, digest: str) -> Path:
    return layout / "blobs" / digest.replace(":", "/", 1)


def image_config(layout: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The manifest and config of the layout's one image (index.json → manifest → config)."""
    index_file = layout / "index.json"
    if not index_file.is_file():
        raise KlutchError(f"{layout} has no index.json", "pass the --out of an image build")
    manifests = json.loads(index_file.read_text())["manifests"]
    if len(manifests) != 1:
        raise KlutchError(f"{index_file} lists {len(manifests)} images", "use a one-image layout")
    manifest = json.loads(blob(layout, manifests[0]["digest"]).read_text())
    return manifest, json.loads(blob(layout, manifest["config"]["digest"]).read_text())


def unpack(layout: Path, into: Path) -> dict[str, Any]:
    """Applies the image's layers in order into ``into``; returns the image's config."""
    manifest, config = image_config(layout)
    into.mkdir(parents=True, exist_ok=True)
    for layer in manifest["layers"]:
        path = str(blob(layout, layer["digest"]))
        subprocess.run(["tar", "--numeric-owner", "-xpzf", path, "-C", str(into)], check=True)
    return config


def user_ids(root: Path, user: str) -> tuple[int, int]:
    """uid and gid of a config's ``User`` (``uid`` or ``uid:gid``); a uid alone takes its group
    from the image's /etc/passwd, as config.md says."""
    uid, _, gid = user.partition(":")
    if not uid.isdigit() or (gid and not gid.isdigit()):
        raise KlutchError(
            f"the image's User {user!r} is not numeric", "build it with a numeric User"
        )
    if not gid:
        for line in (root / "etc/passwd").read_text().splitlines():
            fields = line.split(":")
            if len(fields) > 3 and fields[2] == uid:
                gid = fields[3]
    return int(uid), int(gid or uid)


# What a runtime gives a container before it starts it (runc's default mounts): /proc of its PID
# namespace and a small /dev of its own with the usual character devices and /dev/shm; the
# mounts belong to the mount namespace and vanish with it.
MOUNTS = """
root=$1; shift
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=755,nosuid tmpfs "$root/dev"
for node in null zero full random urandom tty; do
  touch "$root/dev/$node" && mount --bind "/dev/$node" "$root/dev/$node"
done
mkdir "$root/dev/shm" && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$root/dev/shm"
exec chroot "$@"
"""


def start(
    root: Path,
    config: dict[str, Any],
    args: list[str],
    entrypoint: list[str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Runs the unpacked image in ``root``: its Entrypoint (or ``entrypoint``, as a Pod's
    ``command`` replaces it) with ``args`` (or its Cmd), as its User, with only its Env."""
    settings = config["config"]
    uid, gid = user_ids(root, settings.get("User") or "0")
    env = dict(entry.split("=", 1) for entry in settings.get("Env", []))
    command = [
        *("unshare", "--mount", "--pid", "--fork", "sh", "-c", MOUNTS, "sh", str(root)),
        f"--userspec={uid}:{gid}",
        f"--groups={gid}",
        str(root),
        *(settings.get("Entrypoint", []) if entrypoint is None else entrypoint),
        *(args or ([] if entrypoint is not None else settings.get("Cmd", []))),
    ]
    return subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def run(layout: Path, args: list[str], scratch: Path) -> subprocess.CompletedProcess[str]:
    """Unpacks the image into ``scratch`` and runs its entry point with ``args`` (or its Cmd)."""
    root = scratch / "rootfs"
    return start(root, unpack(layout, root), args)
