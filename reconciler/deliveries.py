"""Webhook deliveries seen lately, so that a replayed one triggers nothing.

Forges sign the body only, with no timestamp: whoever captured a delivery could send it again, with
any delivery id header. So a delivery is remembered twice, per registration it verified for: by
the forge's delivery id and by the SHA-256 of its body. A registration is triggered only by a
delivery that neither names; another registration of the same repository (GitHub sends one
delivery id to every hook of an event) still gets its own.

Only verified deliveries are recorded, so strangers cannot fill the memory; it is bounded anyway
(``capacity`` keys, the oldest dropped first) and forgets after ``ttl``. It is one replica's
memory: a replay sent to another reconciler replica within the ttl triggers there once more — a
fetch of the same head, or a new plan of the pull request's current head posted into the same
comment, both idempotent.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

TTL = 3600.0  # seconds; GitHub and GitLab retry or redeliver within minutes
CAPACITY = 100_000  # keys, about 100 bytes each

Key = tuple[str, str, str, str]  # registration, provider, "id" or "body", value


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
        self._seen: OrderedDict[Key, float] = OrderedDict()  # key -> when it expires
        self._lock = threading.Lock()

    def admit(
        self, registrations: Iterable[str], provider: str, delivery: str, digest: str
    ) -> frozenset[str]:
        """The registrations that had not seen this delivery, now recorded as having seen it."""
        with self._lock:
            now = self._clock()
            self._expire(now)
            fresh = frozenset(
                name
                for name in registrations
                if not any(
                    self._seen.get(key, 0.0) > now
                    for key in _keys(name, provider, delivery, digest)
                )
            )
            for name in fresh:
                for key in _keys(name, provider, delivery, digest):
                    self._seen[key] = now + self.ttl
                    self._seen.move_to_end(key)
            while len(self._seen) > self.capacity:
                self._seen.popitem(last=False)
            return fresh

    def forget(
        self, registrations: Iterable[str], provider: str, delivery: str, digest: str
    ) -> None:
        """Undo :meth:`admit` for a delivery that could not be handled, so a retry is not lost."""
        with self._lock:
            for name in registrations:
                for key in _keys(name, provider, delivery, digest):
                    self._seen.pop(key, None)

    def __len__(self) -> int:
        return len(self._seen)

    def _expire(self, now: float) -> None:
        while self._seen:
            key, expires = next(iter(self._seen.items()))
            if expires > now:
                return
            del self._seen[key]


def _keys(name: str, provider: str, delivery: str, digest: str) -> list[Key]:
    keys = [(name, provider, "body", digest)]
    if delivery:
        keys.append((name, provider, "id", delivery))
    return keys
