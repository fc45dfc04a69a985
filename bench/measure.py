"""Ways to see what the reconciler does without busy-polling the clusters, and what the
benchmark processes cost: object counts from one-item pages, watches that note when a change
arrives, a timed push, a process's memory."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.informer import Informer
from tests.kit.git import git

Progress = Callable[[str], None]


class BenchFailure(Exception):
    """A measurement that could not complete; the message says which and why."""


def count(kube: Kube, resource: Resource, namespace: str | None = None) -> int:
    """How many objects exist, from a one-item page: no full list on every poll. Zero while the
    resource is not served yet (the reconciler installs the App Cluster's CRDs itself)."""
    try:
        page = kube._call("GET", resource.path(namespace), query=[("limit", "1")])
    except KubeError as error:
        if error.not_found:
            return 0
        raise
    return len(page.get("items") or []) + int(page["metadata"].get("remainingItemCount") or 0)


def timed_push(clone: Path, attempts: int = 5) -> tuple[float, float]:
    """Push the clone's main: how long the push that succeeded took, and when it returned. A
    rejection (the bot committed meanwhile) is followed by a rebase and another push, untimed."""
    for _ in range(attempts):
        started = time.monotonic()
        try:
            git(clone, "push", "-q", "origin", "HEAD:main")
        except subprocess.CalledProcessError:
            git(clone, "pull", "-q", "--rebase", "origin", "main")
        else:
            finished = time.monotonic()
            return finished - started, finished
    raise BenchFailure(f"git push from {clone} was rejected {attempts} times")


class Expect:
    """Notes when an object matching a predicate is seen, from a watch rather than polling.

    ``arm(predicate)`` before causing the change, ``wait()`` after: the event's own arrival time
    is returned, so the waiting thread's wake-up does not count.
    """

    def __init__(self, kube: Kube, resource: Resource, namespace: str, name: str) -> None:
        self._cond = threading.Condition()
        self._predicate: Callable[[dict], bool] | None = None
        self._seen: float | None = None
        self.informer = Informer(kube, resource, self._on_event, namespace=namespace, name=name)

    def start(self, timeout: float = 60.0) -> Expect:
        self.informer.start()
        if not self.informer.synced.wait(timeout):
            raise BenchFailure(f"the watch {self.informer.name} did not sync in {timeout:.0f}s")
        return self

    def stop(self) -> None:
        self.informer.stop()

    def arm(self, predicate: Callable[[dict], bool]) -> None:
        with self._cond:
            self._predicate, self._seen = predicate, None

    def wait(self, what: str, timeout: float) -> float:
        with self._cond:
            if not self._cond.wait_for(lambda: self._seen is not None, timeout):
                raise BenchFailure(f"timed out after {timeout:.0f}s waiting for {what}")
            assert self._seen is not None
            return self._seen

    def _on_event(self, event: str, obj: dict) -> None:
        now = time.monotonic()
        with self._cond:
            waiting = self._seen is None and self._predicate is not None
            if waiting and event != "DELETED" and self._predicate(obj):
                self._seen = now
                self._cond.notify_all()


def vm_kib(pid: int, field: str) -> int | None:
    """A ``/proc/<pid>/status`` size in KiB (VmHWM: peak resident set, VmRSS: current)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def converge(
    counters: dict[str, Callable[[], int]],
    target: int,
    timeout: float,
    progress: Progress,
    alive: Callable[[], str | None] = lambda: None,
    exact: bool = False,
) -> dict[str, float]:
    """Poll each counter until it reaches ``target`` (with ``exact``, until it equals it: a
    shrinking count); when each first did (monotonic)."""
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    seen = dict.fromkeys(counters, 0)
    while len(done) < len(counters):
        if time.monotonic() > deadline:
            got = ", ".join(f"{name} {seen[name]}/{target}" for name in counters)
            raise BenchFailure(f"claims did not converge within {timeout:.0f}s ({got})")
        if problem := alive():
            raise BenchFailure(problem)
        for name, counter in counters.items():
            if name not in done:
                seen[name] = counter()
                if seen[name] == target or (not exact and seen[name] > target):
                    done[name] = time.monotonic()
        progress(", ".join(f"{name} {seen[name]}/{target}" for name in counters))
        time.sleep(0.2)
    return done
