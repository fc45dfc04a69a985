"""``--kubeconfig``, ``--context`` and ``$KUBECONFIG`` as kubectl reads them, against the stack's
real clusters through several kubeconfig files merged.

k8s.io/client-go/tools/clientcmd/loader.go (``Load``): every ``$KUBECONFIG`` file in order,
missing ones skipped; "the first file to set a particular map key wins", and the merged
``current-context`` is the first file's that sets it (the map config, merged first, is laid over
the reverse-merged struct values). The kubernetes Python client's KubeConfigMerger takes the last
one instead, so these tests order the files to tell the two apart.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.crds import install_crds, load_crds
from tests.kit.git import git

CLI = [sys.executable, "-m", "klutch_gitops.cli"]


def cli(*args: str, kubeconfig: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": kubeconfig, "COLUMNS": "200"}
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=180, cwd=cwd, env=env, check=False
    )


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def files(stack: StackInfo, clusters, tmp_path: Path, closed_port: int) -> dict[str, str]:
    """The Control Plane's CRDs (RepositoryBinding, APIServiceExport: only there); the stack's
    two kubeconfigs (contexts ``control-plane`` and ``app``, each its file's current context), a
    file with a context ``closed`` and no current context, and a missing file."""
    install_crds(clusters["control-plane"], load_crds(cluster="control-plane"))
    closed = tmp_path / "closed.kubeconfig"
    closed.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "closed", "cluster": {"server": f"https://127.0.0.1:{closed_port}"}}
                ],
                "users": [{"name": "closed", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "closed", "context": {"cluster": "closed", "user": "closed"}}
                ],
            }
        )
    )
    return {
        "missing": str(tmp_path / "missing.kubeconfig"),
        "closed": str(closed),
        "control-plane": stack.clusters["control-plane"].kubeconfig,
        "app": stack.clusters["app"].kubeconfig,
    }


def listed(files: dict[str, str], *names: str) -> str:
    return os.pathsep.join(files[name] for name in names)


def test_get_takes_the_first_current_context_of_kubeconfig(
    files: dict[str, str], tmp_path: Path
) -> None:
    """The Control Plane's file comes before the App Cluster's: ``get`` lists RepositoryBindings
    there (the App Cluster does not serve the kind, so the last file's context would fail)."""
    merged = listed(files, "missing", "closed", "control-plane", "app")
    result = cli("get", "-A", kubeconfig=merged, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr

    on_app = cli("get", "-A", "--context", "app", kubeconfig=merged, cwd=tmp_path)
    assert on_app.returncode == 1, on_app.stdout
    assert "repositorybindings.gitops.klutch.anynines.com not found" in on_app.stderr

    only_app = cli("get", "-A", "--kubeconfig", files["app"], kubeconfig=merged, cwd=tmp_path)
    assert only_app.returncode == 1  # --kubeconfig: that file alone, $KUBECONFIG ignored
    assert "not found" in only_app.stderr


def test_plan_reads_both_clusters_by_context_from_kubeconfig(
    files: dict[str, str], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "claims").mkdir()
    (repo / "claims" / "README.md").write_text("claims go here\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "base")
    merged = listed(files, "missing", "closed", "app", "control-plane")
    common = ["plan", "--repo", str(repo), "--base", "main", "--head", "main", "--path", "claims"]
    online = [*common, "--consumer-namespace", "default", "--app-context", "app"]

    result = cli(*online, "--context", "control-plane", kubeconfig=merged, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("## klutch-gitops plan: ✅")

    closed = cli(*online, "--context", "closed", kubeconfig=merged, cwd=tmp_path)
    assert closed.returncode == 2, closed.stdout + closed.stderr
    assert "--context closed: cannot reach https://127.0.0.1:" in closed.stderr
    assert "Traceback" not in closed.stderr

    unknown = cli(*online, "--context", "nope", kubeconfig=merged, cwd=tmp_path)
    assert unknown.returncode == 2, unknown.stdout + unknown.stderr
    assert "nope" in unknown.stderr
    assert "Traceback" not in unknown.stderr
