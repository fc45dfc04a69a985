"""``dev up`` / ``dev down`` / ``dev status``: the local stack as a background daemon.

``dev up`` spawns a supervisor (``python -m klutch_gitops.dev.localstack.daemon``) in a session
of its own; the supervisor owns a ``LocalStack`` and stops it on SIGTERM. Every stack process
shares the supervisor's process group and dies with it (PDEATHSIG), so ``dev down`` can always
clean up: a polite SIGTERM to the supervisor, then SIGKILL for the whole group and for any pid
file left over — even when ``dev up`` itself was killed halfway through start-up.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.dev.localstack.processes import kill_from_pid_file, read_pid, write_pid_file
from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo, StatePaths, programs
from klutch_gitops.errors import KlutchError

UP_TIMEOUT = 300.0
DOWN_GRACE = 30.0


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(os.environ.get("KLUTCH_STATE_DIR") or Path(base) / "klutch-gitops" / "dev")


@dataclass
class UpResult:
    info: StackInfo
    already_running: bool


def up(state_dir: Path, on_event: Callable[[str], None] = lambda _: None) -> UpResult:
    """Start the daemon and wait for the stack; report the running one instead of a second."""
    paths = StatePaths(state_dir.resolve())
    if read_pid(paths.supervisor_pid) is not None:
        if paths.info.exists():
            return UpResult(StackInfo.load(paths.info), already_running=True)
        raise KlutchError(
            f"a local stack is starting in {paths.root} already",
            "wait for it ('klutch-gitops dev status') or stop it ('klutch-gitops dev down')",
        )
    programs()  # fail here, in the caller's terminal, rather than in the daemon's log
    down(paths.root)  # clear what a crashed run may have left
    paths.logs.mkdir(parents=True, exist_ok=True)
    log = paths.logs / "supervisor.log"
    argv = [
        sys.executable,
        "-m",
        "klutch_gitops.dev.localstack.daemon",
        "--state-dir",
        str(paths.root),
    ]
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    write_pid_file(paths.supervisor_pid, daemon.pid, argv)
    seen = 0
    deadline = time.monotonic() + UP_TIMEOUT
    while time.monotonic() < deadline:
        lines = log.read_text(errors="replace").splitlines()
        for line in lines[seen:]:
            on_event(line)
        seen = len(lines)
        if paths.info.exists():
            return UpResult(StackInfo.load(paths.info), already_running=False)
        if daemon.poll() is not None:
            down(paths.root)
            raise KlutchError(
                "the local stack failed to start:\n" + "\n".join(lines[-30:]),
                f"logs of every process are in {paths.logs}",
            )
        time.sleep(0.2)
    down(paths.root)
    raise KlutchError(
        f"the local stack did not start within {UP_TIMEOUT:.0f}s",
        f"logs of every process are in {paths.logs}",
    )


def down(state_dir: Path) -> list[str]:
    """Stop the daemon and every process it started; returns what had to be killed."""
    paths = StatePaths(state_dir.resolve())
    killed: list[str] = []
    supervisor = read_pid(paths.supervisor_pid)
    if supervisor is not None:
        os.kill(supervisor, signal.SIGTERM)
        deadline = time.monotonic() + DOWN_GRACE
        while time.monotonic() < deadline and read_pid(paths.supervisor_pid) is not None:
            time.sleep(0.1)
        # the supervisor leads its session's process group: take any straggler with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(supervisor, signal.SIGKILL)
    paths.supervisor_pid.unlink(missing_ok=True)
    if paths.pids.exists():
        for pid_file in sorted(paths.pids.glob("*.pid")):
            if kill_from_pid_file(pid_file):
                killed.append(pid_file.stem)
    paths.info.unlink(missing_ok=True)
    return killed


@dataclass
class ComponentStatus:
    name: str
    pid: int | None


def status(state_dir: Path) -> tuple[StackInfo | None, list[ComponentStatus]]:
    """The stack's info (None if not running) and whether each recorded process is alive."""
    paths = StatePaths(state_dir.resolve())
    info = StackInfo.load(paths.info) if paths.info.exists() else None
    components = [ComponentStatus("supervisor", read_pid(paths.supervisor_pid))]
    if paths.pids.exists():
        components += [
            ComponentStatus(p.stem, read_pid(p)) for p in sorted(paths.pids.glob("*.pid"))
        ]
    return info, components


def _serve(state_dir: Path) -> None:
    """The daemon's main: start the stack, then sleep until SIGTERM/SIGINT and stop it."""

    def event(message: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)

    def exit_on_signal(signum: int, _frame: object) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):  # a second signal must not cut the stop short
            signal.signal(sig, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_on_signal)
    signal.signal(signal.SIGINT, exit_on_signal)
    stack = LocalStack(state_dir, on_event=event)
    try:
        stack.start()
        reported: set[str] = set()
        while True:  # a crashed process is reported once; 'dev status' shows the stack degraded
            for process in stack.processes:
                if not process.running and process.name not in reported:
                    reported.add(process.name)
                    event(f"{process.name} exited; see {process.log}")
            time.sleep(1.0)
    except KlutchError as error:
        event(f"error: {error}")
        raise SystemExit(1) from None
    finally:
        stack.stop()
        event("stopped")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--state-dir", type=Path, required=True)
    _serve(parser.parse_args().state_dir)
