"""A replica taking repositories over starts with those that have a push pending.

Taking a shard means registering each of its repositories (clones, informers) and a first pass
over every claim; a push made while nobody held the shard would wait behind all of that. So the
taker first asks each remote for its head (``git ls-remote``: no clone, several at once, bounded)
and compares it with the commits known as passed: what the shard's previous holder recorded in
the Lease (``records.py``), the RepositoryBinding's status, and the clone left on disk by an
earlier run. A repository whose head is none of those goes first, and so does one a webhook
stamped on the Lease after its holder's last renewal (its remote need not be asked), in both
queues: its registration and its first pass (``Lanes``). A repository with nothing known, or
a remote that does not answer within ``TRIAGE_SECONDS``, keeps the plain order, and a late
answer still promotes it if it is still waiting.

Registrations run on a pool of their own (``REGISTRATION_WORKERS`` in the manager), beside the
pass workers, so a pending push's first pass never waits behind other repositories' clones. While
an urgent repository has not had its first pass, the other registrations hold back (``hold``,
for at most ``HOLD_SECONDS`` after it became urgent): started beside it, they would register
sooner (nothing to wait for) and fill the pass workers with their own first passes just before
its pass is queued, and compete with it for the two cores meanwhile.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

from klutch_gitops.kube.workqueue import WorkQueue
from reconciler.git.checkout import Checkout
from reconciler.git.credentials import separate
from reconciler.work import Key, Work

log = logging.getLogger(__name__)

TRIAGE_WORKERS = 8  # `git ls-remote` processes at once while taking repositories over
TRIAGE_SECONDS = 5.0  # how long registrations wait for those answers before starting anyway
HOLD_SECONDS = 10.0  # how long other registrations wait for an urgent repository's first pass
# The status fields that name a commit the reconciler passed: the applied one, and the status
# commit it pushed on top (the branch's head once nobody else pushed).
PASSED_STATUS_FIELDS = ("lastAppliedCommit", "lastStatusCommit")


class Lanes:
    """Where registrations and passes are queued: ``Work.REGISTER`` items on the registration
    queue, the others on the pass queue; items of an urgent repository go to the front of
    either, until its first pass ran here."""

    def __init__(
        self,
        passes: WorkQueue[Key],
        registering: WorkQueue[Key],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.passes = passes
        self.registering = registering
        self._clock = clock
        self._urgent: dict[str, float] = {}  # name -> when it became urgent
        self._lock = threading.Condition()
        self._shut = False

    def queue(self, key: Key) -> WorkQueue[Key]:
        return self.registering if key[0] == Work.REGISTER else self.passes

    def add(self, key: Key, *, first: bool = False) -> None:
        self.queue(key).add(key, first=first or self.urgent(key[1]))

    def add_after(self, key: Key, delay: float) -> None:
        self.queue(key).add_after(key, delay)

    def urgent(self, name: str) -> bool:
        with self._lock:
            return name in self._urgent

    def prioritise(self, name: str) -> None:
        """Put ``name``'s waiting registration and pass in front, and its later ones too."""
        with self._lock:
            self._urgent.setdefault(name, self._clock())
        self.registering.promote((Work.REGISTER, name))
        self.passes.promote((Work.SYNC, name))

    def passed(self, name: str) -> None:
        """A first pass ran: the repository is an ordinary one from now on."""
        with self._lock:
            if self._urgent.pop(name, None) is not None:
                self._lock.notify_all()

    def hold(self, name: str) -> None:
        """Before registering ``name``: wait while another repository is urgent, at most until
        ``HOLD_SECONDS`` after the latest became so (one that never passes holds no longer)."""
        with self._lock:
            while not self._shut and name not in self._urgent and self._urgent:
                left = max(self._urgent.values()) + HOLD_SECONDS - self._clock()
                if left <= 0:
                    return
                self._lock.wait(left)

    def shutdown(self) -> None:
        with self._lock:
            self._shut = True
            self._lock.notify_all()
        self.passes.shutdown()
        self.registering.shutdown()


def pending(head: str | None, passed: set[str]) -> bool:
    """Whether a remote at ``head`` has a push not passed yet; unknown (nothing passed known, or
    no answer) is not pending: it only orders work."""
    return head is not None and bool(passed) and head not in passed


def status_commits(status: Mapping[str, object] | None) -> set[str]:
    """The commits a RepositoryBinding's status names as passed."""
    status = status or {}
    return {value for field in PASSED_STATUS_FIELDS if isinstance(value := status.get(field), str)}


def clone_head(work_dir: Path, name: str, url: str, branch: str) -> str | None:
    """The commit the clone an earlier run left in the work directory is at, if there is one."""
    root = work_dir / name / "source"
    if not (root / ".git").is_dir():
        return None
    url, credentials = separate(url, None)
    return Checkout(root, url, branch, credentials, 10.0).head


class TakeOver:
    """Queues the registrations of repositories this replica takes over, pending pushes first.

    ``remote_head(name)`` asks a remote for its branch's head (it may raise); ``passed(name)``
    names the commits known as passed, besides ``recorded``, the shard Lease's record.
    """

    def __init__(
        self,
        lanes: Lanes,
        remote_head: Callable[[str], str | None],
        passed: Callable[[str], set[str]],
    ) -> None:
        self.lanes = lanes
        self.remote_head = remote_head
        self.passed = passed
        self.pool = ThreadPoolExecutor(TRIAGE_WORKERS, thread_name_prefix="take-over")

    def start(
        self, names: Iterable[str], recorded: Mapping[str, str], stamped: str | None = None
    ) -> None:
        """Triage and queue in a thread of its own: the shard thread must not block."""
        names, recorded = list(names), dict(recorded)
        threading.Thread(
            target=self.run, args=(names, recorded, stamped), name="take-over", daemon=True
        ).start()

    def run(
        self, names: list[str], recorded: Mapping[str, str], stamped: str | None = None
    ) -> None:
        """``stamped``: a registration a webhook named, pending without asking its remote."""
        if stamped in names:
            self.lanes.prioritise(stamped)
        try:
            futures: dict[Future[bool], str] = {
                self.pool.submit(self._pending, name, recorded.get(name)): name for name in names
            }
        except RuntimeError:  # the reconciler stops: nothing to queue any more
            return
        answered, late = wait(futures, timeout=TRIAGE_SECONDS)
        first = sorted(futures[f] for f in answered if not f.exception() and f.result())
        if first:
            log.info("taking over with pushes pending first", extra={"repositories": first})
        for name in first:
            self.lanes.prioritise(name)
        for name in names:
            self.lanes.add((Work.REGISTER, name))
        for future in late:
            future.add_done_callback(functools.partial(self._answered, name=futures[future]))

    def _answered(self, future: Future[bool], name: str) -> None:
        if not future.exception() and future.result():
            log.info("a push pending, found late", extra={"repository": name})
            self.lanes.prioritise(name)

    def _pending(self, name: str, recorded: str | None) -> bool:
        known = self.passed(name) | ({recorded} if recorded else set())
        if not known:
            return False
        try:
            head = self.remote_head(name)
        except Exception as error:  # an unanswered remote only keeps its place
            log.info("no head for a take-over", extra={"repository": name, "error": str(error)})
            return False
        return pending(head, known)

    def stop(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
