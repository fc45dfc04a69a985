"""What the image is: its Debian packages, entry point, user, environment and ports.

The Dockerfile says the same things in its own syntax;
tests/unit/tools/release/image/test_image_spec.py holds the two together. The package list
(``packages.txt``) and ``install.sh`` sit beside this module, where the repository's .dockerignore
lets ``docker build`` see them too, and both builds read them.
"""

from __future__ import annotations

import os
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.errors import KlutchError

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
PACKAGES_FILE = HERE / "packages.txt"
INSTALL_SCRIPT = HERE / "install.sh"
LOCK_FILE = ROOT / "requirements.lock"

SUITE = "bookworm"  # Debian 12: python3 is 3.11, the Python requirements.lock is made for
VARIANT = "minbase"
VENV = "/opt/klutch-gitops"
USER = "10001"
ENTRYPOINT = ("/usr/bin/tini", "--", "klutch-gitops")
CMD = ("--help",)
PORTS = (8080, 8443)
ENV = (
    f"PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/tmp",
    "PYTHONDONTWRITEBYTECODE=1",
    "PYTHONUNBUFFERED=1",
)
REGISTRY_REPOSITORY = (
    "ghcr.io/anynines/klutch-gitops"  # the chart's default image.registry/repository
)


def packages() -> list[str]:
    """The Debian packages of ``packages.txt``, in file order."""
    names = []
    for number, line in enumerate(PACKAGES_FILE.read_text().splitlines(), 1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if not name.replace("-", "").replace(".", "").replace("+", "").isalnum():
            raise KlutchError(
                f"{PACKAGES_FILE}:{number}: {name!r} is not a Debian package name",
                "write one package name a line (comments start with #)",
            )
        names.append(name)
    return names


def project_version() -> str:
    """The version in pyproject.toml: the image's tag and its version label."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def source_date_epoch() -> int:
    """``$SOURCE_DATE_EPOCH``, else the time of the checkout's last commit: every timestamp in
    the image (file mtimes are clamped to it, the config's ``created``) so a rebuild of the same
    commit gives the same digests (reproducible-builds.org's convention)."""
    if value := os.environ.get("SOURCE_DATE_EPOCH"):
        if not value.isdigit():
            raise KlutchError(
                f"SOURCE_DATE_EPOCH={value!r} is not a number of seconds",
                "unset it or set it to a Unix time such as $(git log -1 --format=%ct)",
            )
        return int(value)
    result = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
        capture_output=True,
        text=True,
        check=False,
    )
    return int(result.stdout.strip()) if result.returncode == 0 and result.stdout.strip() else 0


def revision() -> str:
    """The commit the image is built from (its ``org.opencontainers.image.revision`` label)."""
    result = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return result.stdout.strip() if result.returncode == 0 else ""


@dataclass(frozen=True)
class Platform:
    """The build machine's architecture in the three spellings the build needs."""

    debian: str  # dpkg: amd64, arm64
    oci: str  # the config's architecture (Go's GOARCH)
    wheel: str  # the manylinux platform tags' suffix

    @classmethod
    def host(cls) -> Platform:
        machine = os.uname().machine
        known = {
            "x86_64": cls("amd64", "amd64", "x86_64"),
            "aarch64": cls("arm64", "arm64", "aarch64"),
        }
        if machine not in known:
            raise KlutchError(
                f"cannot build the image on a {machine} machine",
                "build on x86_64 or aarch64 Linux, or use the Dockerfile with docker buildx",
            )
        return known[machine]


def labels(version: str, commit: str, created: str) -> dict[str, str]:
    """The image's ``org.opencontainers.image.*`` labels (image-spec annotations.md)."""
    found = {
        "org.opencontainers.image.title": "klutch-gitops",
        "org.opencontainers.image.description": (
            "GitOps front door for Klutch data services: the reconciler and the bind API"
        ),
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": commit,
        "org.opencontainers.image.created": created,
    }
    return {key: value for key, value in found.items() if value}
