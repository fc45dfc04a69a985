"""One ``klutch-gitops run`` process of the fleet measurement, and what its CPU and memory are
read against: /proc of the process, and an idle Python process importing what it imports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.measure import BenchFailure, vm_kib
from bench.stack import die_with_parent

IDLE_IMPORTS = (
    "klutch_gitops.cli, klutch_gitops.logs, klutch_gitops.config_file, reconciler.manager"
)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Replica:
    """One ``klutch-gitops run`` process, its peak RSS sampled every 0.2 s."""

    name: str
    config: Path
    log: Path
    process: subprocess.Popen[bytes] | None = None
    peak_kib: int = 0
    _stopped: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Replica:
        command = [str(Path(sys.executable).parent / "klutch-gitops"), "run"]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [*command, "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "POD_NAME": self.name},
                preexec_fn=die_with_parent,
            )
        self._stopped.clear()
        threading.Thread(target=self._sample, name=f"rss-{self.name}", daemon=True).start()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def identity(self) -> str:
        """Its identity in the Leases (``POD_NAME`` and pid, as ``default_identity``)."""
        return f"{self.name}_{self.pid}"

    def _sample(self) -> None:
        while not self._stopped.wait(0.2):
            self.peak_kib = max(self.peak_kib, vm_kib(self.pid, "VmHWM") or 0)

    def died(self) -> str | None:
        if self.process is None or self.process.poll() is None:
            return None
        tail = self.log.read_text(errors="replace")[-1500:]
        return f"replica {self.name} exited with {self.process.returncode}:\n{tail}"

    def kill(self) -> None:
        self._stopped.set()
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        self._stopped.set()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def cpu_seconds(pid: int) -> float:
    """User and system time of a process and its waited-for children (``git`` included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / CLOCK_TICKS


def cpu_percent(pids: list[int], seconds: float) -> float:
    """The CPU the processes used over a window, as a percentage of one core."""
    before = sum(cpu_seconds(pid) for pid in pids)
    started = time.monotonic()
    time.sleep(seconds)
    used = sum(cpu_seconds(pid) for pid in pids) - before
    return 100 * used / (time.monotonic() - started)


def idle_peak_kib() -> int:
    """VmHWM of a Python process that imported what ``klutch-gitops run`` imports, then idles."""
    code = f"import sys, {IDLE_IMPORTS}; print('ready', flush=True); sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as idle:
        assert idle.stdout is not None
        assert idle.stdin is not None
        if idle.stdout.readline().strip() != "ready":
            raise BenchFailure("the idle Python process could not import the reconciler")
        time.sleep(0.5)
        kib = vm_kib(idle.pid, "VmHWM")
        idle.stdin.close()
    if kib is None:
        raise BenchFailure("could not read the idle process's VmHWM")
    return kib
