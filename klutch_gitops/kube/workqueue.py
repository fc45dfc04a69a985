"""A rate-limited work queue with client-go's semantics, for threads.

Triggers (webhooks, polls, file events, cluster watches) only add keys; workers take them. A key
waiting is queued once however often it is added, one key is never handled by two workers at once,
and a key that fails comes back later, with per-key exponential back-off and an overall token
bucket, so a broken repository or an unreachable cluster cannot spin the reconciler. A key added
``first`` (or promoted) waits in a front lane that workers drain before the others: a replica
taking repositories over starts with those that have a push pending.
"""

from __future__ import annotations

import heapq
import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, Protocol, TypeVar

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)  # a queue only takes keys in

log = logging.getLogger(__name__)

JITTER = 0.1  # a back-off is shortened by up to this fraction, so keys failing together spread out


class QueueObserver(Protocol):
    """What a queue tells its metrics (client-go's workqueue metrics provider, in small).

    ``started`` and ``finished`` name the key: the observer times the work, and can tell how long
    the keys still being handled have run (client-go's unfinished-work and longest-running-
    processor gauges).
    """

    def added(self, depth: int) -> None: ...
    def started(self, key: Hashable, waited: float, depth: int) -> None: ...
    def finished(self, key: Hashable) -> None: ...
    def retried(self) -> None: ...


class _Unobserved:
    def added(self, depth: int) -> None:
        pass

    def started(self, key: Hashable, waited: float, depth: int) -> None:
        pass

    def finished(self, key: Hashable) -> None:
        pass

    def retried(self) -> None:
        pass


class KeyQueue(Protocol[K_contra]):
    """What triggers need of a queue: adds, now or later."""

    def add(self, key: K_contra, *, first: bool = False) -> None: ...
    def add_after(self, key: K_contra, delay: float) -> None: ...


class WorkQueue(Generic[K]):
    """Deduplicating FIFO of keys with delayed and rate-limited adds, and a front lane.

    ``clock`` is the time base of delays, back-off and the token bucket (tests pass a fake one);
    the ``timeout`` of :meth:`get` is always real time.
    """

    def __init__(
        self,
        *,
        base_delay: float = 0.5,
        max_delay: float = 300.0,
        qps: float = 20.0,
        burst: int = 100,
        clock: Callable[[], float] = time.monotonic,
        observer: QueueObserver | None = None,
    ) -> None:
        """``observer`` hears of adds, waits, work times and retries (``reconciler/metrics.py``)."""
        self._observer = observer or _Unobserved()
        self._added: dict[K, float] = {}  # key -> when it entered the queue (real time)
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._qps = qps
        self._burst = burst
        self._clock = clock
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._front: deque[K] = deque()  # keys added first: handed out before _queue's
        self._first: set[K] = set()  # keys to queue in front when they are queued again
        self._dirty: set[K] = set()  # keys queued, or re-added while processing
        self._processing: set[K] = set()
        self._waiting: dict[K, float] = {}  # key -> when a delayed add becomes due
        self._heap: list[tuple[float, int, K]] = []  # entries not matching _waiting are stale
        self._seq = 0  # heap tie-breaker: keys need not be orderable
        self._failures: dict[K, int] = {}
        self._tokens = float(burst)
        self._refilled = clock()
        self._shutting_down = False

    def add(self, key: K, *, first: bool = False) -> None:
        """Queue ``key`` once; ``first``: ahead of every key not added first (a waiting key
        moves to the front lane, one being handled goes there when it is queued again)."""
        with self._cond:
            if first:
                self._first.add(key)
                self._promote(key)
            self._add(key)

    def promote(self, key: K) -> None:
        """Move ``key`` to the front lane if it waits, or once it is queued again; never adds."""
        with self._cond:
            if key in self._dirty or key in self._processing:
                self._first.add(key)
                self._promote(key)

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` once ``delay`` seconds have passed; an earlier pending add wins."""
        if delay <= 0:
            self.add(key)
            return
        with self._cond:
            if self._shutting_down:
                return
            due = self._clock() + delay
            if key in self._waiting and self._waiting[key] <= due:
                return
            self._waiting[key] = due
            self._seq += 1
            heapq.heappush(self._heap, (due, self._seq, key))
            self._cond.notify()  # a getter may be sleeping until a later due time

    def add_rate_limited(self, key: K) -> None:
        """Add ``key`` after its back-off (grown by this failure) or the token bucket's wait."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
            backoff = min(self._max_delay, self._base_delay * 2.0**failures)
            backoff *= 1.0 - JITTER * random.random()  # noqa: S311 - spreading, not secrecy
            delay = max(backoff, self._reserve_token())
        self._observer.retried()
        self.add_after(key, delay)

    def forget(self, key: K) -> None:
        """Reset the back-off of ``key``: call after it was handled successfully."""
        with self._cond:
            self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        with self._cond:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> K | None:
        """The next key, marked as processing until :meth:`done`; None on timeout or shutdown."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while not self._shutting_down:
                next_due = self._promote_due()
                if self._front or self._queue:
                    key = self._front.popleft() if self._front else self._queue.popleft()
                    self._first.discard(key)
                    self._dirty.discard(key)
                    self._processing.add(key)
                    now = time.monotonic()
                    self._observer.started(key, now - self._added.pop(key, now), self._depth())
                    return key
                wait = None if next_due is None else max(0.0, next_due - self._clock())
                if deadline is not None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return None
                    wait = remaining if wait is None else min(wait, remaining)
                self._cond.wait(wait)
            return None

    def done(self, key: K) -> None:
        """Finish processing ``key``; if it was added meanwhile it is queued again now."""
        with self._cond:
            if key in self._processing:
                self._processing.discard(key)
                self._observer.finished(key)
            if key in self._dirty:
                self._lane(key).append(key)
                self._observer.added(self._depth())
                self._cond.notify()
            else:
                self._first.discard(key)  # promoted while handled, and not queued again

    def shutdown(self) -> None:
        """Stop handing out keys: every blocked and future :meth:`get` returns None."""
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            self._promote_due()
            return self._depth()

    def _depth(self) -> int:
        return len(self._front) + len(self._queue)

    def _lane(self, key: K) -> deque[K]:
        return self._front if key in self._first else self._queue

    def _promote(self, key: K) -> None:
        """A waiting key leaves the back lane for the front one (both are short: O(n) is fine)."""
        if key in self._dirty and key not in self._processing and key in self._queue:
            self._queue.remove(key)
            self._front.append(key)

    def _add(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        self._added[key] = time.monotonic()
        if key not in self._processing:
            self._lane(key).append(key)
            self._observer.added(self._depth())
            self._cond.notify()

    def _promote_due(self) -> float | None:
        """Move due delayed keys into the queue; the next due time still pending, if any."""
        now = self._clock()
        while self._heap:
            due, _, key = self._heap[0]
            if self._waiting.get(key) != due:
                heapq.heappop(self._heap)
            elif due <= now:
                heapq.heappop(self._heap)
                del self._waiting[key]
                self._add(key)
            else:
                return due
        return None

    def _reserve_token(self) -> float:
        """Take a token from the bucket; how long until it is really there (may be owed)."""
        now = self._clock()
        self._tokens = min(float(self._burst), self._tokens + (now - self._refilled) * self._qps)
        self._refilled = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self._qps


def run_workers(
    queue: WorkQueue[K], handler: Callable[[K], None], workers: int, name: str
) -> list[threading.Thread]:
    """Start ``workers`` daemon threads feeding ``handler``; they end when the queue shuts down.

    A handler that raises is logged with its key and retried with back-off; one that returns
    resets the key's back-off.
    """

    def work() -> None:
        while (key := queue.get()) is not None:
            try:
                handler(key)
            except Exception:
                log.exception(
                    "%s: handling %s failed, retrying with back-off",
                    name,
                    key,
                    extra={"queue": name, "key": str(key), "failures": queue.failures(key) + 1},
                )
                queue.add_rate_limited(key)
            else:
                queue.forget(key)
            finally:
                queue.done(key)

    threads = [
        threading.Thread(target=work, name=f"{name}-{index}", daemon=True)
        for index in range(workers)
    ]
    for thread in threads:
        thread.start()
    return threads
