"""What notices that a repository moved when no webhook tells us: polling and file watching.

Both only call ``on_change(key)``; fetching and applying is the work queue's job. Polling asks the
remote for one ref (``git ls-remote``, reconciler.git.remote), which is cheap and needs no
clone; local ``file://`` remotes are watched through the file system instead, so a push shows at
once.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

import watchfiles

from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import redact

K = TypeVar("K", bound=Hashable)

log = logging.getLogger(__name__)

JITTER = 0.1  # polls are spread by this fraction, so many reconcilers do not beat in step
RETRY_DELAY = 5.0  # seconds before a failed file watch starts again
_UNSEEN = object()  # no observation yet: the first one always counts as a change
_FAILED = object()  # an ask that failed: nothing observed


@dataclass(frozen=True)
class _Remote:
    url: str
    branch: str
    period: float  # seconds between two asks


def next_poll(now: float, period: float, draw: float) -> float:
    """When a remote asked at ``now`` is asked again: ``period`` later, spread by ``JITTER``
    (``draw`` in [0, 1)), so remotes watched at the same moment drift apart."""
    return now + period * (1.0 + JITTER * (2.0 * draw - 1.0))


def rescheduled(due: float | None, now: float, period: float, draw: float) -> float:
    """A watched remote's next ask after ``watch``: at once when it is new (``due`` None), else
    no later than one new ``period`` from now, so a shortened interval takes effect at once and
    a lengthened one after the ask already planned."""
    if due is None:
        return now
    return min(due, next_poll(now, period, draw))


def due_now(dues: Mapping[K, float], now: float) -> tuple[list[K], float | None]:
    """The keys due at ``now``, earliest first, and the seconds until the next one is due
    (None: nothing watched)."""
    ready = sorted((key for key, at in dues.items() if at <= now), key=lambda key: dues[key])
    later = [at for at in dues.values() if at > now]
    if ready:
        return ready, 0.0
    return ready, (min(later) - now) if later else None


class Poller(Generic[K]):
    """Runs ``ls_remote(key, url, branch)`` for every watched repository at its own interval, in
    one thread that sleeps until the earliest remote is due; the key lets the caller ask with
    that registration's own credentials, never those of another registration of the same URL.

    ``on_change(key)`` is called when a branch's commit differs from the one seen last, and for
    the first observation, so a repository is synchronised once when it starts being watched.
    A remote that something else watches too (a ``file://`` one) is asked only every ``every``
    intervals: the poll is a safety net there, and 100 remotes asked every interval keep a core
    busy spawning ``git``.
    """

    def __init__(
        self,
        interval: float,
        ls_remote: Callable[[K, str, str], str | None],
        on_change: Callable[[K], None],
    ) -> None:
        self._interval = interval  # for remotes watched without one of their own
        self._ls_remote = ls_remote
        self._on_change = on_change
        self._lock = threading.Lock()
        self._remotes: dict[K, _Remote] = {}
        self._seen: dict[K, object] = {}
        self._told: set[K] = set()  # remotes whose first observation on_change has heard
        self._due: dict[K, float] = {}  # time.monotonic() of each remote's next ask
        self._stop = threading.Event()
        self._wake = threading.Event()  # the set of remotes or their intervals changed
        self._thread: threading.Thread | None = None

    def watch(
        self, key: K, url: str, branch: str, interval: float | None = None, every: int = 1
    ) -> None:
        """Follow ``branch`` at ``url`` every ``interval`` seconds (None: the poller's own)
        times ``every``; a changed URL or branch counts as unseen and is asked at once."""
        remote = _Remote(url, branch, (interval or self._interval) * every)
        with self._lock:
            old = self._remotes.get(key)
            if old == remote:
                return
            moved = old is None or (old.url, old.branch) != (url, branch)
            if moved:
                self._seen[key] = _UNSEEN
                self._told.discard(key)
            due = None if moved else self._due.get(key)
            self._remotes[key] = remote
            self._due[key] = rescheduled(due, time.monotonic(), remote.period, random.random())  # noqa: S311
        self._wake.set()

    def unwatch(self, key: K) -> None:
        with self._lock:
            self._remotes.pop(key, None)
            self._seen.pop(key, None)
            self._told.discard(key)
            self._due.pop(key, None)

    def answered(self, key: K) -> bool:
        """Whether a watched remote's first ask has answered and ``on_change`` has been told:
        from then on only a moved branch calls it, so a registration whose pass followed is
        quiet until a push."""
        with self._lock:
            return key in self._told

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="git-poller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the ``ls-remote`` in flight, if any; no further repository is asked."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()  # before looking at the schedule, so a watch() now is not lost
            with self._lock:
                keys, wait = due_now(self._due, time.monotonic())
                remotes = [(key, self._remotes[key]) for key in keys]
            for key, remote in remotes:
                if self._stop.is_set():
                    return
                self._poll(key, remote)
            if not remotes:
                self._wake.wait(wait)

    def _poll(self, key: K, remote: _Remote) -> None:
        """Ask one remote, plan its next ask, and tell ``on_change`` when its branch moved."""
        try:
            sha: object = self._ls_remote(key, remote.url, remote.branch)
        except Exception as error:
            log.warning(
                "polling %s failed: %s",
                redact(remote.url),
                redact(str(error)),
                extra={"key": str(key), "url": redact(remote.url), "branch": remote.branch},
            )
            sha = _FAILED
        with self._lock:
            current = self._remotes.get(key)
            if current is None or (current.url, current.branch) != (remote.url, remote.branch):
                return  # unwatched or re-pointed meanwhile: watch() planned its next ask
            self._due[key] = next_poll(time.monotonic(), current.period, random.random())  # noqa: S311
            if sha is _FAILED or self._seen.get(key) == sha:
                return  # failed, or unchanged
            self._seen[key] = sha
        log.info(
            "%s %s moved to %s",
            redact(remote.url),
            remote.branch,
            sha,
            extra={"key": str(key), "url": redact(remote.url), "branch": remote.branch},
        )
        _notify(self._on_change, key)
        with self._lock:
            if self._seen.get(key) == sha:  # not re-pointed meanwhile
                self._told.add(key)


def _git_dir(repository: Path) -> Path:
    """The directory holding ``refs/`` for a bare repository or a working tree's ``.git``."""
    if (repository / ".git").is_dir():
        return (repository / ".git").resolve()
    if (repository / "HEAD").is_file() and (repository / "refs").is_dir():
        return repository.resolve()
    raise KlutchError(
        f"{repository} is not a Git repository (no .git directory, no bare refs/ and HEAD)",
        "point the file:// URL at a bare repository or a clone's top directory",
    )


class FileWatcher(Generic[K]):
    """Watches the refs of local repositories in one thread, calling ``on_change(key)``.

    Git writes a ref as ``<ref>.lock`` and renames it into place; ``packed-refs`` is replaced the
    same way, which ends a watch on that file, so the watch loop restarts after such a change, as
    it does when repositories are added or removed. Changes during a restart are not seen.
    """

    def __init__(self, on_change: Callable[[K], None], *, debounce: float = 0.2) -> None:
        self._on_change = on_change
        self._debounce_ms = max(1, round(debounce * 1000))
        self._lock = threading.Lock()
        self._dirs: dict[K, Path] = {}
        self._stop = threading.Event()
        self._restart = threading.Event()  # ends the current watchfiles loop
        self._thread: threading.Thread | None = None

    def watch(self, key: K, repository: Path | str) -> None:
        directory = _git_dir(Path(repository))
        with self._lock:
            self._dirs[key] = directory
        self._restart.set()

    def unwatch(self, key: K) -> None:
        with self._lock:
            self._dirs.pop(key, None)
        self._restart.set()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="git-file-watcher", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._restart.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        while True:
            self._restart.clear()  # before looking at _stop, so a stop() now is not lost
            if self._stop.is_set():
                return
            with self._lock:
                dirs = dict(self._dirs)
            paths = _watched_paths(dirs.values())
            if not paths:
                self._restart.wait()
                continue
            try:
                self._watch(dirs, paths)
            except Exception:
                log.exception("watching local repositories failed; retrying")
                self._restart.wait(RETRY_DELAY)  # or sooner, when the set of repositories changes

    def _watch(self, dirs: dict[K, Path], paths: list[Path]) -> None:
        for changes in watchfiles.watch(
            *paths,
            watch_filter=_is_ref_change,
            debounce=self._debounce_ms,
            stop_event=self._restart,
        ):
            changed = {Path(path) for _, path in changes}
            for key, directory in dirs.items():
                if any(path.is_relative_to(directory) for path in changed):
                    log.info("refs of %s changed", directory, extra={"key": str(key)})
                    _notify(self._on_change, key)
            replaced = any(path.name == "packed-refs" for path in changed)
            if replaced or _watched_paths(dirs.values()) != paths:
                return  # watch again: the old packed-refs is gone, or packed-refs appeared


def _watched_paths(dirs: Iterable[Path]) -> list[Path]:
    paths: list[Path] = []
    for directory in dict.fromkeys(dirs):
        paths.append(directory / "refs")
        if (directory / "packed-refs").exists():
            paths.append(directory / "packed-refs")
    return paths


def _is_ref_change(_: watchfiles.Change, path: str) -> bool:
    return not path.endswith(".lock")


def _notify(on_change: Callable[[K], None], key: K) -> None:
    try:
        on_change(key)
    except Exception:
        log.exception("on_change failed for %s", key, extra={"key": str(key)})
