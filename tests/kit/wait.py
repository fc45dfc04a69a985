"""Waiting for what the reconciler does, by polling: it works in its own threads or process."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


class TimedOut(Exception):
    """A wait that ran out of time; the message says for what and what the check last saw."""


def eventually(
    check: Callable[[], Any], what: str, timeout: float = 30.0, interval: float = 0.1
) -> Any:
    """Poll ``check`` until it returns something truthy, and return that; an AssertionError from
    it counts as "not yet" (so a check can say what differs). TimedOut after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except AssertionError as error:
            last = error
        else:
            if last:
                return last
        time.sleep(interval)
    raise TimedOut(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")
