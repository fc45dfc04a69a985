"""The Debian root filesystem under the image, made by mmdebstrap and cached by its inputs.

A cold build downloads and unpacks about a hundred .debs (a minute or two); the tarball is kept in
``~/.cache/klutch-gitops/image/<key>/`` where the key hashes the suite, variant, architecture,
mirrors and package list, so a second build, or one in another clone, reuses it. ``--refresh``
makes it anew (to pick up Debian's security updates).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

from klutch_gitops.errors import KlutchError
from tools.release.image import spec

MIRRORS = (
    f"deb http://deb.debian.org/debian {spec.SUITE} main",
    f"deb http://deb.debian.org/debian {spec.SUITE}-updates main",
    f"deb http://deb.debian.org/debian-security {spec.SUITE}-security main",
)
# "slim" as Debian's official slim images are (debuerreotype scripts/.slimify-excludes and
# .slimify-includes): dpkg skips docs, manuals and translations, keeps copyright files.
SLIM = (
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/groff/*",
    "path-exclude=/usr/share/info/*",
    "path-exclude=/usr/share/linda/*",
    "path-exclude=/usr/share/lintian/overrides/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/man/*",
)
# The host's settings for reaching its mirror that mmdebstrap's own apt would otherwise not see
# (it runs apt with a config of its own): a proxy, or a mirror whose Release files are not fresh.
PASSED_APT_OPTIONS = (
    "Acquire::http::Proxy",
    "Acquire::https::Proxy",
    "Acquire::Check-Valid-Until",
    "Acquire::Check-Date",
)


def cache_root() -> Path:
    """Outside the clone, beside the stack's binaries: ``$XDG_CACHE_HOME/klutch-gitops/image``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "klutch-gitops" / "image"


def base_key(packages: list[str], platform: spec.Platform) -> str:
    """What makes one base root filesystem differ from another, hashed."""
    inputs = {
        "suite": spec.SUITE,
        "variant": spec.VARIANT,
        "architecture": platform.debian,
        "mirrors": MIRRORS,
        "slim": SLIM,
        "packages": sorted(packages),
    }
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]


def ensure_tool(command: str, package: str) -> str:
    """``command``'s path, installing Debian's ``package`` when it is missing (as the Makefile's
    debian-packages target installs the stack's)."""
    if found := shutil.which(command):
        return found
    if not shutil.which("apt-get"):
        raise KlutchError(
            f"{command} is not installed and this is not a Debian-based system",
            f"build with the Dockerfile where Docker runs, or install {package} (Debian, Ubuntu)",
        )
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for step in (
        ["apt-get", "update", "-qq"],
        ["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
    ):
        run([*sudo, *step], f"installing {package}", env=env)
    if found := shutil.which(command):
        return found
    raise KlutchError(f"apt-get installed {package} but {command} is not on PATH", "check $PATH")


def host_apt_options() -> list[str]:
    """``--aptopt`` arguments for the options of PASSED_APT_OPTIONS that the host's apt sets."""
    if not shutil.which("apt-config"):
        return []
    dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, check=False)
    options = []
    for line in dump.stdout.splitlines():
        name, _, value = line.partition(" ")
        if name in PASSED_APT_OPTIONS and value:
            options.append(f"--aptopt={name} {value}")
    return options


def mmdebstrap_command(
    mmdebstrap: str, packages: list[str], platform: spec.Platform, out: Path
) -> list[str]:
    """The mmdebstrap call that makes the base as a tarball ``out`` (man mmdebstrap(1))."""
    return [
        mmdebstrap,
        "--quiet",
        "--mode=root",
        f"--variant={spec.VARIANT}",
        f"--architectures={platform.debian}",
        f"--include={','.join(packages)}",
        "--format=tar",
        *(f"--dpkgopt={option}" for option in SLIM),
        *host_apt_options(),
        spec.SUITE,
        str(out),
        *MIRRORS,
    ]


def base_tarball(platform: spec.Platform, *, refresh: bool = False) -> tuple[Path, bool]:
    """The cached base root filesystem as a tarball, made first if missing or ``refresh``;
    the flag says whether it was made now."""
    packages = spec.packages()
    directory = cache_root() / base_key(packages, platform)
    tarball = directory / "rootfs.tar"
    if tarball.exists() and not refresh:
        return tarball, False
    mmdebstrap = ensure_tool("mmdebstrap", "mmdebstrap")
    directory.mkdir(parents=True, exist_ok=True)
    partial = directory / "rootfs.tar.partial"
    command = mmdebstrap_command(mmdebstrap, packages, platform, partial)
    # stdin closed: mmdebstrap reads mirrors from a stdin that is not a terminal.
    run(command, "mmdebstrap", stdin=subprocess.DEVNULL)
    partial.replace(tarball)
    (directory / "inputs.json").write_text(
        json.dumps({"packages": packages, "suite": spec.SUITE, "mirrors": MIRRORS}, indent=2)
    )
    return tarball, True


def extract(tarball: Path, into: Path) -> None:
    """Unpacks the base as root: owners, modes and device nodes as mmdebstrap made them."""
    into.mkdir(parents=True, exist_ok=True)
    run(["tar", "--numeric-owner", "-xpf", str(tarball), "-C", str(into)], "unpacking the base")


def run(command: list[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Runs a build step; a failure names the step and shows the end of its output."""
    result = subprocess.run(command, capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise KlutchError(
            f"{what} failed (exit {result.returncode}): {' '.join(command[:6])} …\n{tail}",
            "see the output above; a network failure is worth a second try",
        )
    return result
