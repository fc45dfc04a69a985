"""Child processes that never outlive their owner.

Every child gets ``PR_SET_PDEATHSIG=SIGKILL`` so the kernel kills it when the process that started
it dies, however it dies (SIGKILL included), and a pid file so ``dev down`` can find it from
another process. A pid is only trusted while ``/proc/<pid>/cmdline`` is still the command line we
started, so a reused pid never gets a stray signal.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from klutch_gitops.errors import KlutchError

PR_SET_PDEATHSIG = 1
STOP_GRACE_SECONDS = 10.0
# "first-last": a block of ports that free_port hands out from (a test process's own, which its
# children inherit; tests/workers.py claims it)
PORT_RANGE_VARIABLE = "KLUTCH_PORT_RANGE"


def free_port() -> int:
    """A loopback port that nothing listens on right now: any the kernel picks, or the next
    free one of the block ``$KLUTCH_PORT_RANGE`` names. The processes sharing a block take turns
    through a cursor file, so none is given a port that another was just given and is about to
    listen on (the kernel's pick can be such a port of a parallel test worker)."""
    block = os.environ.get(PORT_RANGE_VARIABLE)
    if not block:
        return _bind(0)
    first, last = (int(part) for part in block.split("-"))
    with (port_dir() / f"{block}.next").open("a+") as cursor:
        fcntl.flock(cursor, fcntl.LOCK_EX)  # released when the file closes
        cursor.seek(0)
        for port in ports_from(first, last, int(cursor.read() or first)):
            try:
                _bind(port)
            except OSError:
                continue  # listened on, or in TIME_WAIT
            cursor.truncate(0)
            cursor.write(str(port + 1))
            return port
    raise KlutchError(
        f"no free loopback port left in {PORT_RANGE_VARIABLE}={block}",
        f"unset {PORT_RANGE_VARIABLE}, or stop what listens there",
    )


def port_dir() -> Path:
    """Where the port blocks' owner locks and cursors are, shared by every process here."""
    directory = Path(tempfile.gettempdir()) / "klutch-gitops-ports"
    directory.mkdir(mode=0o700, exist_ok=True)
    return directory


def ports_from(first: int, last: int, start: int) -> Iterator[int]:
    """Every port of ``first..last`` once, from ``start`` on and round to it again."""
    size = last - first + 1
    offset = (start - first) % size
    for step in range(size):
        yield first + (offset + step) % size


def _bind(port: int) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        port_bound: int = sock.getsockname()[1]
        return port_bound


def port_open(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _die_with_parent(parent_pid: int) -> Callable[[], None]:
    def preexec() -> None:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def is_ours(pid: int, argv: list[str]) -> bool:
    """Whether ``pid`` is alive and still runs ``argv`` (not a zombie, not a reused pid)."""
    return cmdline(pid) == argv and not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


@dataclass
class Process:
    """A named child process with its log file and pid file."""

    name: str
    argv: list[str]
    log: Path
    pid_file: Path
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as log:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                preexec_fn=_die_with_parent(os.getpid()),
            )
        write_pid_file(self.pid_file, self.popen.pid, self.argv)

    @property
    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; removes the pid file."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL at once, as a crash or the OOM killer would: no cleanup of any kind. A later
        ``start`` runs the same command again (same ports, same data)."""
        if self.popen is not None and self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        self.pid_file.unlink(missing_ok=True)

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def wait_until(self, ready: Callable[[], bool], what: str, timeout: float) -> float:
        """Poll ``ready`` until true; fail early, with the log, if the process exits."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if not self.running:
                code = self.popen.returncode if self.popen else None
                raise KlutchError(
                    f"{self.name} exited (code {code}) before {what}; last log lines "
                    f"({self.log}):\n{self.log_tail()}",
                    "read the log above; a port taken by another process or a stale state "
                    "directory are the usual causes ('klutch-gitops dev down' clears the latter)",
                )
            if ready():
                return time.monotonic() - started
            time.sleep(0.1)
        raise KlutchError(
            f"{self.name}: no {what} after {timeout:.0f}s; last log lines "
            f"({self.log}):\n{self.log_tail()}",
            "read the log above; on a loaded machine raise the timeout",
        )


def write_pid_file(pid_file: Path, pid: int, argv: list[str]) -> None:
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    pid_file.write_text(json.dumps({"pid": pid, "argv": argv}))


def read_pid(pid_file: Path) -> int | None:
    """The live process a pid file names, or None when it is gone or the pid was reused."""
    try:
        record = json.loads(pid_file.read_text())
        pid, argv = int(record["pid"]), list(record["argv"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return pid if is_ours(pid, argv) else None


def kill_from_pid_file(pid_file: Path, sig: signal.Signals = signal.SIGKILL) -> bool:
    """Signal the process a pid file names if it is still ours; removes the file. True if sent."""
    pid = read_pid(pid_file)
    pid_file.unlink(missing_ok=True)
    if pid is None:
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True
