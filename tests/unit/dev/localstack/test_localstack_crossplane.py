from __future__ import annotations

import stat
from pathlib import Path

import pytest

from klutch_gitops.dev.localstack import crossplane
from klutch_gitops.dev.localstack.pki import KeyPair


@pytest.fixture
def paths(tmp_path: Path) -> crossplane.CrossplanePaths:
    return crossplane.CrossplanePaths(tmp_path / "state" / "crossplane")


def test_command_names_the_state_directory_and_turns_off_what_cannot_run(
    paths: crossplane.CrossplanePaths, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REGISTRY", "registry.example")  # the caller's environment stays out
    argv, env = crossplane.command(Path("/bin/crossplane"), paths, 1001, 1002)
    assert argv[:3] == ["/bin/crossplane", "core", "start"]
    for flag in (
        "--enable-webhooks=false",
        "--leader-election=false",
        f"--tls-client-certs-dir={paths.tls}",
        f"--cache-dir={paths.cache}",
        "--metrics-port=1001",
        "--health-probe-port=1002",
    ):
        assert flag in argv
    assert env["KUBECONFIG"] == str(paths.kubeconfig)
    assert "REGISTRY" not in env
    assert env["HOME"] == str(paths.root)


def test_client_tls_directory_has_the_three_files_core_start_loads(
    paths: crossplane.CrossplanePaths,
) -> None:
    directory = crossplane.write_client_tls(paths, b"CA", KeyPair(b"CERT", b"KEY"))
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == {
        "ca.crt": b"CA",
        "tls.crt": b"CERT",
        "tls.key": b"KEY",
    }
    assert stat.S_IMODE((directory / "tls.key").stat().st_mode) == 0o600


def test_crds_load_sorted_by_file(tmp_path: Path) -> None:
    for name in ("bs.b.example.io", "as.a.example.io"):
        (tmp_path / f"{name}.yaml").write_text(f"metadata: {{name: {name}}}\n")
    names = [crd["metadata"]["name"] for crd in crossplane.load_crds(tmp_path)]
    assert names == ["as.a.example.io", "bs.b.example.io"]
