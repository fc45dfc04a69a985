"""The wheels the image installs: the project's, built from the checkout, and one of every pin in
requirements.lock, downloaded on the host for the root filesystem's Python and architecture.

The install inside the root filesystem then runs with ``--no-index`` and without a network, so
the image holds exactly the locked closure. The downloaded wheels are cached per lock file,
Python version and architecture; the project's wheel is built fresh on every build.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from pathlib import Path

from tools.release.image import spec
from tools.release.image.rootfs import cache_root, run

OLDEST_GLIBC_MINOR = 17  # manylinux2014, the oldest manylinux tag wheels still ship
BOOKWORM_GLIBC_MINOR = 36  # Debian 12's glibc 2.36


def manylinux_platforms(platform: spec.Platform) -> list[str]:
    """Every manylinux tag bookworm's glibc runs, newest first: pip expands an explicit
    ``--platform`` only into its legacy aliases (pip/_internal/utils/compatibility_tags.py
    ``_custom_manylinux_platforms``), so each tag is named."""
    arch = platform.wheel
    tags = [
        f"manylinux_2_{minor}_{arch}"
        for minor in range(BOOKWORM_GLIBC_MINOR, OLDEST_GLIBC_MINOR - 1, -1)
    ]
    return [*tags, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}"]


def locked_wheels(python: str, platform: spec.Platform) -> Path:
    """A directory with a wheel of every pin in requirements.lock for ``python`` (``3.11``),
    downloaded once per lock content."""
    lock = spec.LOCK_FILE.read_bytes()
    key = hashlib.sha256(lock + f"{python} {platform.wheel}".encode()).hexdigest()[:16]
    directory = cache_root() / "wheels" / key
    if (directory / ".complete").exists():
        return directory
    partial = directory.with_name(key + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    abi = "cp" + python.replace(".", "")
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--only-binary=:all:",
        f"--python-version={python}",
        "--implementation=cp",
        f"--abi={abi}",
        "--abi=abi3",
        "--abi=none",
        *(f"--platform={tag}" for tag in manylinux_platforms(platform)),
        "--dest",
        str(partial),
        "--requirement",
        str(spec.LOCK_FILE),
    ]
    run(command, f"downloading the wheels of {spec.LOCK_FILE.name} for Python {python}")
    (partial / ".complete").touch()
    shutil.rmtree(directory, ignore_errors=True)
    partial.replace(directory)
    return directory


# Left out of the copy the wheel is built from: setuptools writes build/ and *.egg-info beside
# the sources, which in the checkout would race other builds and leave files behind.
NOT_COPIED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache"
)


def project_wheel(into: Path, scratch: Path, tree: Path = spec.ROOT) -> Path:
    """Builds the wheel of ``tree`` (the checkout, uncommitted changes included) with ``pip
    wheel --no-deps`` into ``into``, from a copy of it in ``scratch``."""
    into.mkdir(parents=True, exist_ok=True)
    source = scratch / "source"
    shutil.copytree(tree, source, ignore=NOT_COPIED, symlinks=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--wheel-dir",
        str(into),
        str(source),
    ]
    run(command, "building the klutch-gitops wheel")
    [wheel] = into.glob("klutch_gitops-*.whl")
    return wheel
