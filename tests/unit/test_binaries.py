from __future__ import annotations

import stat
from pathlib import Path

import pytest

from klutch_gitops.errors import KlutchError
from klutch_gitops.localstack import binaries

ALL = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "dex")


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty cache and no override variables."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("KLUTCH_BIN_DIR", raising=False)
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    return tmp_path


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_versions_come_from_the_committed_wrapper_modules() -> None:
    versions = {c.name: c.version() for c in binaries.COMPONENTS}
    assert versions["kubernetes"] == "v1.34.3"
    assert versions["etcd"].startswith("v3.6.")
    assert versions["dex"] == "v0.0.0-20240807174518-43956db7fd75"  # v2.41.1


def test_kubernetes_version_is_stamped_into_both_version_packages() -> None:
    kubernetes = next(c for c in binaries.COMPONENTS if c.name == "kubernetes")
    flags = kubernetes.ldflags()
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        assert f"-X {pkg}.gitVersion=v1.34.3" in flags
        assert f"-X {pkg}.gitMinor=34" in flags


def test_cache_is_keyed_by_component_and_version(isolated: Path) -> None:
    etcd = next(c for c in binaries.COMPONENTS if c.name == "etcd")
    assert (
        binaries.cache_dir(etcd)
        == isolated / "cache" / "klutch-gitops" / "bin" / f"etcd-{etcd.version()}"
    )


def test_missing_binaries_are_named_with_the_fix(isolated: Path) -> None:
    with pytest.raises(KlutchError) as raised:
        binaries.require(*ALL)
    assert all(name in raised.value.message for name in ALL)
    assert "make bins" in raised.value.fix


def test_overrides_take_precedence_over_the_cache(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubernetes = next(c for c in binaries.COMPONENTS if c.name == "kubernetes")
    cached = executable(binaries.cache_dir(kubernetes) / "kube-apiserver")
    assert binaries.require("kube-apiserver")["kube-apiserver"] == cached

    assets = isolated / "assets"
    envtest = executable(assets / "kube-apiserver")
    executable(assets / "etcd")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    assert binaries.require("kube-apiserver")["kube-apiserver"] == envtest

    mine = executable(isolated / "mine" / "kube-apiserver")
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "mine"))
    resolved = binaries.resolve_all()
    assert resolved["kube-apiserver"].path == mine
    assert resolved["kube-apiserver"].source == "KLUTCH_BIN_DIR"
    assert resolved["etcd"].source == "KUBEBUILDER_ASSETS"  # falls through per binary
    assert resolved["dex"].path is None


def test_a_non_executable_file_does_not_count(
    isolated: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated / "bins").mkdir()
    (isolated / "bins" / "etcd").write_text("not a program")
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "bins"))
    assert binaries.resolve_all()["etcd"].path is None


def test_build_skips_what_is_present(isolated: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ALL:
        executable(isolated / "prebuilt" / name)
    monkeypatch.setenv("KLUTCH_BIN_DIR", str(isolated / "prebuilt"))
    reports = binaries.build_missing()
    assert {r.binary for r in reports} == set(ALL)
    assert {(r.source, r.seconds) for r in reports} == {("KLUTCH_BIN_DIR", None)}
