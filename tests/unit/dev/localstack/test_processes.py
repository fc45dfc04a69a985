"""Child processes die with their owner and pid files never point at a stranger."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from klutch_gitops.dev.localstack.processes import (
    PORT_RANGE_VARIABLE,
    Process,
    free_port,
    kill_from_pid_file,
    port_open,
    ports_from,
    read_pid,
    write_pid_file,
)


def gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return True
        time.sleep(0.05)
    return False


def test_start_stop_and_pid_file(tmp_path: Path) -> None:
    process = Process("sleeper", ["sleep", "60"], tmp_path / "s.log", tmp_path / "s.pid")
    process.start()
    pid = read_pid(process.pid_file)
    assert pid == process.popen.pid
    process.stop(grace=5)
    assert not process.running
    assert not process.pid_file.exists()
    assert gone(pid)


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path: Path) -> None:
    stubborn = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)",
    ]
    process = Process("stubborn", stubborn, tmp_path / "s.log", tmp_path / "s.pid")
    process.start()
    process.wait_until(lambda: "ready" in process.log.read_text(), "ready", 10)
    started = time.monotonic()
    process.stop(grace=0.5)
    assert process.popen.returncode == -signal.SIGKILL
    assert time.monotonic() - started < 5


def test_children_die_when_their_owner_is_killed(tmp_path: Path) -> None:
    """PDEATHSIG: SIGKILL the process that started a child; the kernel kills the child."""
    owner_code = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from klutch_gitops.dev.localstack.processes import Process
        p = Process("child", ["sleep", "60"], Path({str(tmp_path / "c.log")!r}),
                    Path({str(tmp_path / "c.pid")!r}))
        p.start()
        print(p.popen.pid, flush=True)
        time.sleep(60)
    """)
    owner = subprocess.Popen([sys.executable, "-c", owner_code], stdout=subprocess.PIPE, text=True)
    child = int(owner.stdout.readline())
    assert read_pid(tmp_path / "c.pid") == child
    owner.kill()
    owner.wait()
    assert gone(child)
    assert read_pid(tmp_path / "c.pid") is None  # the stale pid file is recognised as stale


def test_a_pid_file_naming_another_command_is_not_trusted(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        write_pid_file(tmp_path / "x.pid", stranger.pid, ["/usr/bin/etcd", "--data-dir=/x"])
        assert read_pid(tmp_path / "x.pid") is None
        assert kill_from_pid_file(tmp_path / "x.pid") is False
        assert stranger.poll() is None  # untouched
        assert not (tmp_path / "x.pid").exists()
    finally:
        stranger.kill()
        stranger.wait()


def test_wait_until_reports_an_early_exit_with_the_log(tmp_path: Path) -> None:
    process = Process(
        "crasher",
        ["sh", "-c", "echo 'bind: address already in use'; exit 3"],
        tmp_path / "c.log",
        tmp_path / "c.pid",
    )
    process.start()
    with pytest.raises(Exception, match="address already in use") as raised:
        process.wait_until(lambda: False, "readiness", 10)
    assert "exited (code 3)" in str(raised.value)


def test_free_port_is_free() -> None:
    assert not port_open(free_port())


def test_a_block_is_walked_once_from_the_cursor_round_to_it() -> None:
    assert list(ports_from(100, 104, 103)) == [103, 104, 100, 101, 102]
    assert list(ports_from(100, 104, 105)) == [100, 101, 102, 103, 104]  # past the end: wraps


def test_a_port_block_hands_out_each_free_port_in_turn(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two calls never give the same port (the first is not listened on yet), a port something
    listens on is skipped, and after the last port the block starts over."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        first = probe.getsockname()[1]  # a free port, so most likely its neighbours are too
    block = range(first, first + 3)
    monkeypatch.setenv(PORT_RANGE_VARIABLE, f"{block[0]}-{block[-1]}")
    given = [free_port(), free_port()]
    assert len(set(given)) == 2
    assert set(given) <= set(block)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", block[2]))
        taken.listen()
        assert free_port() == block[0]  # block[2] is in use
    assert (tmp_path / "klutch-gitops-ports" / f"{block[0]}-{block[-1]}.next").exists()
