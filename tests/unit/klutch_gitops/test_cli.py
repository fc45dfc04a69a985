"""The CLI's contract: exit codes and errors with a fix, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from klutch_gitops import __version__

CLI = [sys.executable, "-m", "klutch_gitops.cli"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], capture_output=True, text=True, timeout=60, env=env, check=False
    )


def test_status_without_a_stack_exits_3(tmp_path: Path) -> None:
    result = run("dev", "status", "--state-dir", str(tmp_path))
    assert result.returncode == 3
    assert "no local stack is running" in result.stdout


def test_status_json_without_a_stack(tmp_path: Path) -> None:
    result = run("dev", "status", "--state-dir", str(tmp_path), "-o", "json")
    assert result.returncode == 3
    assert '"running": false' in result.stdout


def test_up_without_binaries_says_what_to_do(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KLUTCH_BIN_DIR", "KUBEBUILDER_ASSETS")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "empty-cache")
    result = run("dev", "up", "--state-dir", str(tmp_path / "state"), env=env)
    assert result.returncode == 1
    assert "binaries not found" in result.stderr
    assert "make bins" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "stack.json").exists()


def test_down_without_a_stack_is_harmless(tmp_path: Path) -> None:
    result = run("dev", "down", "--state-dir", str(tmp_path))
    assert result.returncode == 0
    assert "stopped" in result.stdout


def test_klutch_bind_is_also_a_kubectl_plugin() -> None:
    """kubectl runs `kubectl klutch-bind ...` as the executable kubectl-klutch_bind on PATH."""
    plugin = Path(sys.executable).parent / "kubectl-klutch_bind"
    result = subprocess.run(
        [str(plugin), "--version"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == __version__
