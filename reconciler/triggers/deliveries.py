"""Webhook deliveries seen lately, so that a replayed one triggers nothing.

Forges sign the body only, with no timestamp: whoever captured a delivery could send it again, with
any delivery id header. So a delivery is remembered twice, per registration it verified for: by
the forge's delivery id and by the SHA-256 of its body. A registration is triggered only by a
delivery that neither names; another registration of the same repository (GitHub sends one
delivery id to every hook of an event) still gets its own.

Only verified deliveries are recorded, so strangers cannot fill the memory; it is bounded anyway
(``capacity`` keys per registration, the oldest dropped first: a tenant flooding its own
registration with signed deliveries evicts only its own records) and forgets after ``ttl``.
It is one replica's memory: a replay sent to another reconciler replica within the ttl triggers
there once more — a fetch of the same head, or a new plan of the pull request's current head
posted into the same comment, both idempotent.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

TTL = 3600.0  # seconds; GitHub and GitLab retry or redeliver within minutes
CAPACITY = 10_000  # keys per registration, about 100 bytes each

Key = tuple[str, str, str]  # provider, "id" or "body", value


class Deliveries:
    def __init__(
        self,
        ttl: float = TTL,
        capacity: int = CAPACITY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl = ttl
        self.capacity = capacity
        self._clock = clock
        self._seen: dict[str, OrderedDict[Key, float]] = {}  # registration -> key -> expiry
        self._lock = threading.Lock()

    def admit(
        self, registrations: Iterable[str], provider: str, delivery: str, digest: str
    ) -> frozenset[str]:
        """The registrations that had not seen this delivery, now recorded as having seen it."""
        with self._lock:
            now = self._clock()
            keys = _keys(provider, delivery, digest)
            fresh = []
            for name in registrations:
                book = self._seen.setdefault(name, OrderedDict())
                _expire(book, now)
                if any(book.get(key, 0.0) > now for key in keys):
                    continue
                fresh.append(name)
                for key in keys:
                    book[key] = now + self.ttl
                    book.move_to_end(key)
                while len(book) > self.capacity:
                    book.popitem(last=False)
            return frozenset(fresh)

    def forget(
        self, registrations: Iterable[str], provider: str, delivery: str, digest: str
    ) -> None:
        """Undo :meth:`admit` for a delivery that could not be handled, so a retry is not lost."""
        with self._lock:
            for name in registrations:
                book = self._seen.get(name, OrderedDict())
                for key in _keys(provider, delivery, digest):
                    book.pop(key, None)

    def __len__(self) -> int:
        return sum(len(book) for book in self._seen.values())


def _expire(book: OrderedDict[Key, float], now: float) -> None:
    """Drop the expired keys at the front (keys are kept in the order they expire)."""
    while book:
        key, expires = next(iter(book.items()))
        if expires > now:
            return
        del book[key]


def _keys(provider: str, delivery: str, digest: str) -> list[Key]:
    keys = [(provider, "body", digest)]
    if delivery:
        keys.append((provider, "id", delivery))
    return keys
