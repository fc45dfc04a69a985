"""The kinds of work the reconciler queues, and the queue's key: a kind and a registration name.

A ``StrEnum``, so logs and metrics show the same words as before the kinds had a type.
"""

from __future__ import annotations

from enum import StrEnum


class Work(StrEnum):
    REGISTER = "register"  # (re)start a registration's sync from its spec, or stop it
    SYNC = "sync"  # one pass
    WRITEBACK = "writeback"  # a status commit
    PLATFORM = "platform"  # a pass of the platform repository

    def __repr__(self) -> str:
        """The word alone: a key logs as ``('writeback', 'team-a')``, as it did as a string."""
        return repr(self.value)


Key = tuple[Work, str]  # (kind, registration name)
