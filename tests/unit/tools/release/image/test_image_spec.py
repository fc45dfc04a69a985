"""The Dockerfile and the daemonless build (``python -m tools.release.image build``) make the same
image: the same Debian suite and packages (one list, tools/release/image/packages.txt, read by
both), the same install script, entry point, command, user, environment, ports and labels."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from klutch_gitops.errors import KlutchError
from tools.release.image import rootfs, spec, wheels

pytestmark = pytest.mark.unit

DOCKERFILE = spec.ROOT / "Dockerfile"
AMD64 = spec.Platform("amd64", "amd64", "x86_64")


def instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    joined: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        joined.append(pending)
        pending = ""
    return [(text.split(None, 1)[0].upper(), text.split(None, 1)[1].strip()) for text in joined]


def arguments(name: str) -> list[str]:
    return [args for instruction, args in instructions() if instruction == name]


def pairs(name: str) -> dict[str, str]:
    """KEY=VALUE pairs of every ENV or LABEL instruction."""
    found: dict[str, str] = {}
    for args in arguments(name):
        for word in shlex.split(args):
            key, _, value = word.partition("=")
            found[key] = value
    return found


def test_the_dockerfile_starts_from_the_same_debian_suite() -> None:
    [base_arg] = [a for a in arguments("ARG") if a.startswith("DEBIAN_IMAGE=")]
    assert base_arg == f"DEBIAN_IMAGE=debian:{spec.SUITE}-slim"
    assert arguments("FROM") == ["${DEBIAN_IMAGE}"]


def test_both_paths_install_the_one_package_list() -> None:
    copies = " ".join(arguments("COPY"))
    runs = " ".join(arguments("RUN"))
    assert "tools/release/image/packages.txt" in copies
    assert "xargs apt-get install -y --no-install-recommends" in runs
    assert "klutch-image/packages.txt" in runs
    command = rootfs.mmdebstrap_command("mmdebstrap", spec.packages(), AMD64, Path("out.tar"))
    [include] = [word for word in command if word.startswith("--include=")]
    assert include.removeprefix("--include=").split(",") == spec.packages()
    assert {"python3", "python3-venv", "git", "openssh-client", "tini", "ca-certificates"} <= set(
        spec.packages()
    )
    assert f"--variant={spec.VARIANT}" in command
    assert spec.SUITE in command


def test_both_paths_run_the_one_install_script_on_the_locked_wheels() -> None:
    assert "tools/release/image/install.sh" in " ".join(arguments("COPY"))
    [install] = [run for run in arguments("RUN") if "install.sh" in run]
    assert "requirements.lock" in install  # tests/unit/charts/test_chart.py asks for it too
    assert "pip download --no-deps --only-binary=:all:" in install
    assert "pip wheel --no-deps" in install
    script = spec.INSTALL_SCRIPT.read_text()
    assert "--no-index" in script
    assert "'klutch-gitops[server]'" in script
    assert f"{spec.USER}:{spec.USER}" in script  # the passwd line of the numeric user
    assert spec.VENV in script


def test_entrypoint_command_user_env_and_ports_agree() -> None:
    [entrypoint] = arguments("ENTRYPOINT")
    [command] = arguments("CMD")
    [user] = arguments("USER")
    assert json.loads(entrypoint) == list(spec.ENTRYPOINT)
    assert json.loads(command) == list(spec.CMD)
    assert user == spec.USER
    assert pairs("ENV") == dict(entry.split("=", 1) for entry in spec.ENV)
    assert [int(port) for args in arguments("EXPOSE") for port in args.split()] == list(spec.PORTS)


def test_the_dockerfiles_labels_are_the_builds_fixed_ones() -> None:
    built = spec.labels("1.2.3", "abc", "2026-01-01T00:00:00Z")
    assert pairs("LABEL")
    assert {key: built[key] for key in pairs("LABEL")} == pairs("LABEL")


def test_docker_build_sees_what_the_dockerfile_copies() -> None:
    """.dockerignore admits only what the Dockerfile copies (everything else: ``*``)."""
    admitted = [
        line[1:].rstrip("/")
        for line in (spec.ROOT / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    ]
    for args in arguments("COPY"):
        for source in args.split()[:-1]:
            assert any(source == a or source.startswith(a + "/") for a in admitted), source


def test_the_dockerfile_copies_every_package_the_wheel_holds() -> None:
    copied = {args.split()[0] for args in arguments("COPY")}
    for package in ("klutch_gitops", "klutch_local", "reconciler", "bind_api", "catalog"):
        assert package in copied


def test_a_bad_package_line_is_refused_with_its_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    listing = tmp_path / "packages.txt"
    listing.write_text("# comment\ngit\npython3 && rm -rf /\n")
    monkeypatch.setattr(spec, "PACKAGES_FILE", listing)
    with pytest.raises(KlutchError, match=r"packages.txt:3: .* is not a Debian package name"):
        spec.packages()


def test_the_base_is_cached_by_what_makes_it() -> None:
    packages = spec.packages()
    key = rootfs.base_key(packages, AMD64)
    assert rootfs.base_key(list(reversed(packages)), AMD64) == key  # order does not matter
    assert rootfs.base_key([*packages, "curl"], AMD64) != key
    assert rootfs.base_key(packages, spec.Platform("arm64", "arm64", "aarch64")) != key


def test_wheels_are_chosen_for_bookworms_glibc() -> None:
    tags = wheels.manylinux_platforms(AMD64)
    assert tags[0] == "manylinux_2_36_x86_64"
    assert "manylinux_2_17_x86_64" in tags
    assert "manylinux2014_x86_64" in tags
    assert not any(tag.startswith("manylinux_2_37") for tag in tags)


def test_source_date_epoch_must_be_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(KlutchError, match="SOURCE_DATE_EPOCH"):
        spec.source_date_epoch()
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    assert spec.source_date_epoch() == 1700000000
