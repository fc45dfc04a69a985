"""The Dockerfile still builds, and builds the image the daemonless build makes: built here
without a Docker daemon by buildah (Debian's package, installed when missing; ``buildah bud``
reads Dockerfiles and .dockerignore as ``docker build`` does), FROM the cached Debian base of
``python -m tools.release.image build`` standing in for ``debian:bookworm-slim``, which cannot be
pulled here. The result must start, print the version, carry the same config as the daemonless image
(image-spec config.md fields) and hold exactly the locked Python closure.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path

import pytest

from tools.release.image import rootfs, runtime, spec

VERSION = tomllib.loads((spec.ROOT / "pyproject.toml").read_text())["project"]["version"]
BASE = "localhost/debian:bookworm-slim"
BUILT = "localhost/klutch-gitops:dockerfile-test"
DEBIAN_PATH = (
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # as in Debian images
)
# The host's CA bundle, for builds behind a TLS-inspecting proxy (pip in the build trusts only
# the container's bundle otherwise); on other machines it holds the public CAs anyway.
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


def locked() -> dict[str, str]:
    pins = {}
    for line in spec.LOCK_FILE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            pins[name.lower().replace("-", "_").replace(".", "_")] = version.strip()
    return pins


@pytest.mark.timeout(1200)
def test_the_dockerfile_builds_the_same_image(tmp_path: Path) -> None:
    buildah = rootfs.ensure_tool("buildah", "buildah")
    storage = tmp_path / "storage"
    b = [buildah, "--root", str(storage), "--runroot", str(tmp_path / "run")]
    b += ["--storage-driver", "vfs"]
    try:
        base, _ = rootfs.base_tarball(spec.Platform.host())
        container = rootfs.run([*b, "from", "scratch"], "buildah from").stdout.strip()
        rootfs.run([*b, "add", container, str(base), "/"], "buildah add")
        rootfs.run([*b, "config", "--env", DEBIAN_PATH, container], "buildah config")
        rootfs.run([*b, "commit", "-q", container, BASE], "buildah commit")
        pip_conf = tmp_path / "pip.conf"
        pip_conf.write_text("[global]\ncert = /etc/host-ca.crt\n")
        rootfs.run(
            [
                *(*b, "bud", "--isolation", "chroot", "--network", "host"),
                *("-v", f"{HOST_CA}:/etc/host-ca.crt:ro", "-v", f"{pip_conf}:/etc/pip.conf:ro"),
                *("--build-arg", f"DEBIAN_IMAGE={BASE}", "-t", BUILT),
                *("-f", str(spec.ROOT / "Dockerfile"), str(spec.ROOT)),
            ],
            "buildah bud",
        )
        layout = tmp_path / "layout"
        rootfs.run([*b, "push", "-q", BUILT, f"oci:{layout}:{VERSION}"], "buildah push")
        root = tmp_path / "rootfs"
        config = runtime.unpack(layout, root)
        settings = config["config"]
        assert settings["Entrypoint"] == list(spec.ENTRYPOINT)
        assert settings["Cmd"] == list(spec.CMD)
        assert settings["User"] == spec.USER
        assert settings["Env"] == list(spec.ENV)
        assert sorted(settings["ExposedPorts"]) == [f"{port}/tcp" for port in spec.PORTS]

        result = runtime.start(root, config, ["version"])
        assert result.returncode == 0, result.stderr
        assert result.stdout.split()[-1] == VERSION
        site = root / "opt/klutch-gitops/lib/python3.11/site-packages"
        installed = {
            path.name.removesuffix(".dist-info").rpartition("-")[::2]
            for path in site.glob("*.dist-info")
        }
        pins = locked()
        unpinned = [
            f"{n}=={v}" for n, v in installed if n != "klutch_gitops" and pins.get(n.lower()) != v
        ]
        assert unpinned == []
        assert ("klutch_gitops", VERSION) in installed
        assert not (site / "pip").exists()  # install.sh leaves pip out of the venv
    finally:
        rootfs.run([*b, "rm", "--all"], "buildah rm")
        shutil.rmtree(storage, ignore_errors=True)
        for scratch in ("rootfs", "layout"):
            shutil.rmtree(tmp_path / scratch, ignore_errors=True)
