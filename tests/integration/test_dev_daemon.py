"""``klutch-gitops dev up/status/down`` as a person runs them, including rude interruptions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.processes import cmdline, read_pid
from klutch_gitops.dev.localstack.stack import StackInfo, StatePaths

CLI = [sys.executable, "-m", "klutch_gitops.cli"]
LOCAL_BACKEND = ("postgres", "local-provider")  # the PostgreSQL server and its provider


def klutch(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=400, check=False)
    if check and result.returncode != 0:
        pytest.fail(
            f"klutch-gitops {' '.join(args)} exited {result.returncode}:\n"
            f"{result.stdout}\n{result.stderr}"
        )
    return result


def processes_using(state_dir: Path) -> list[tuple[int, list[str]]]:
    """Every live process whose command line mentions the state directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and entry.name != str(os.getpid()):
            args = cmdline(int(entry.name))
            if any(str(state_dir) in arg for arg in args):
                found.append((int(entry.name), args))
    return found


def listening_pids(ports: list[int]) -> dict[int, set[int]]:
    """Which processes listen on ``ports`` (TCP), from /proc/net/tcp{,6} and socket fds.

    tcp6 too: Crossplane's servers listen on every interface (``:port``), which Go opens as one
    dual-stack IPv6 socket.
    """
    inodes: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            port, state, inode = int(fields[1].rsplit(":", 1)[1], 16), fields[3], fields[9]
            if state == "0A" and port in ports:  # 0A: LISTEN
                inodes[f"socket:[{inode}]"] = port
    holders: dict[int, set[int]] = {}
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            target = str(fd.readlink())
        except OSError:
            continue
        if target in inodes:
            holders.setdefault(inodes[target], set()).add(int(fd.parts[2]))
    return holders


def ports_left_open(state_dir: Path, ports: list[int]) -> list[int]:
    """Ports still held by a process of this stack. Another process may get a freed port at
    once (other tests pick ports too); that one is not ours."""
    return sorted(
        port
        for port, pids in listening_pids(ports).items()
        if any(str(state_dir) in " ".join(cmdline(pid)) for pid in pids)
    )


def children_of(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == pid:
            found.append(int(stat.parent.name))
    return found


def eventually_gone_pids(pids: list[int], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [pid for pid in pids if Path(f"/proc/{pid}").exists()] == []


def eventually_gone(state_dir: Path, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while processes_using(state_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_using(state_dir) == []


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "dev"
    yield directory
    klutch("dev", "down", "--state-dir", str(directory), check=False)


def test_up_status_second_up_and_down(state_dir: Path) -> None:
    first = klutch("dev", "up", "--state-dir", str(state_dir))
    info = StackInfo.load(StatePaths(state_dir).info)
    for expected in (
        info.clusters["app"].kubeconfig,
        info.clusters["control-plane"].kubeconfig,
        info.dex.issuer,
        info.dex.email,
        info.dex.password,
    ):
        assert expected in first.stdout

    kubectl = binaries.require("kubectl")["kubectl"]
    for cluster in info.clusters.values():
        namespaces = subprocess.run(
            [str(kubectl), "--kubeconfig", cluster.kubeconfig, "get", "ns", "-o", "name"],
            capture_output=True,
            text=True,
            check=True,
        )
        assert "namespace/kube-system" in namespaces.stdout

    status = json.loads(klutch("dev", "status", "--state-dir", str(state_dir), "-o", "json").stdout)
    running = {p["name"]: p["pid"] for p in status["processes"]}
    assert {"crossplane", *LOCAL_BACKEND} <= running.keys()
    assert all(running.values()), running
    # while up, every server port is held by a process of this stack (the check below can fail)
    assert len(ports_left_open(state_dir, info.ports)) >= 6
    held = listening_pids(info.ports)
    assert sum(running["crossplane"] in pids for pids in held.values()) == 2  # metrics, health
    assert info.postgres is not None
    assert held[info.postgres.port] == {running["postgres"]}
    provider_argv = cmdline(running["local-provider"])
    health = next(int(a.split("=", 1)[1]) for a in provider_argv if a.startswith("--health-port="))
    assert held[health] == {running["local-provider"]}
    assert f"--postgres-port={info.postgres.port}" in provider_argv
    backends = children_of(running["postgres"])
    assert backends, "the server's own processes (checkpointer, walwriter, ...)"
    second = klutch("dev", "up", "--state-dir", str(state_dir))
    assert "already running" in second.stdout
    assert (
        StackInfo.load(StatePaths(state_dir).info).clusters["app"].url == info.clusters["app"].url
    )

    klutch("dev", "down", "--state-dir", str(state_dir))
    eventually_gone(state_dir)
    assert ports_left_open(state_dir, info.ports) == []
    eventually_gone_pids(backends)
    assert not any((StatePaths(state_dir).pids / f"{name}.pid").exists() for name in LOCAL_BACKEND)
    status = klutch("dev", "status", "--state-dir", str(state_dir), check=False)
    assert status.returncode == 3
    assert "no local stack is running" in status.stdout


def test_sigkill_of_dev_up_midway_then_down_leaves_nothing(state_dir: Path) -> None:
    up = subprocess.Popen(
        [*CLI, "dev", "up", "--state-dir", str(state_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    etcd_pid = StatePaths(state_dir).pids / "etcd.pid"
    deadline = time.monotonic() + 60
    while not etcd_pid.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert etcd_pid.exists(), "dev up never started etcd"
    up.send_signal(signal.SIGKILL)
    up.wait()
    assert processes_using(state_dir), "the daemon should outlive the CLI that started it"

    down = klutch("dev", "down", "--state-dir", str(state_dir))
    assert "stopped" in down.stdout
    eventually_gone(state_dir)


def test_sigkill_of_the_daemon_takes_every_process_with_it(state_dir: Path) -> None:
    klutch("dev", "up", "--state-dir", str(state_dir))
    info = StackInfo.load(StatePaths(state_dir).info)
    server = read_pid(StatePaths(state_dir).pids / "postgres.pid")
    assert server is not None
    backends = children_of(server)
    supervisor = json.loads(StatePaths(state_dir).supervisor_pid.read_text())["pid"]
    os.kill(supervisor, signal.SIGKILL)
    eventually_gone(state_dir)
    assert ports_left_open(state_dir, info.ports) == []
    # the server's own processes notice the postmaster's death and end too
    eventually_gone_pids(backends)
    # the leftovers are only stale files now; down says so and clears them
    klutch("dev", "down", "--state-dir", str(state_dir))
    assert not StatePaths(state_dir).info.exists()
