"""Events that aggregate like client-go's recorder, so ``kubectl describe`` stays readable.

The same Event (involved object, type, reason, message) told again is not a new object: its
``count`` and ``lastTimestamp`` are patched, as client-go's EventCorrelator does (eventObserve in
kubernetes/client-go tools/record/events_cache.go, keyed like its getEventKey, with an LRU of
4096 entries like its maxLruCacheEntries). A repeat within ``repeat_seconds`` (5 minutes, the
refill rate of that file's spam filter, defaultSpamQPS = 1/300) is dropped: a standing situation
that a pass finds every few seconds adds one count per five minutes, not one per pass. When the
Event is gone (expired after the apiserver's --event-ttl, or deleted) it is created again.

Writes happen in a thread of the recorder's own, as client-go's broadcaster does, so a pass that
applies a thousand claims does not wait for a thousand Event writes; at most ``MAX_QUEUED``
(1000, client-go's maxQueuedEvents) wait, and more are dropped (its DropIfChannelFull).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import queue
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.resources import EVENTS

log = logging.getLogger(__name__)

COMPONENT = "klutch-gitops"
NORMAL, WARNING = "Normal", "Warning"
MAX_ENTRIES = 4096
REPEAT_SECONDS = 300.0
MESSAGE_LIMIT = 1024
MAX_QUEUED = 1000

Key = tuple[str, str, str, str, str, str]  # (apiVersion, kind, namespace/name, uid, type, reason)


class EventApi(Protocol):
    """The calls the recorder makes (``klutch_gitops.kube.client.Kube`` has them)."""

    def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict[str, Any]: ...

    def patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]: ...


@dataclass
class _Told:
    name: str  # the Event object's name
    count: int
    at: float  # monotonic time of the last write


@dataclass(frozen=True)
class _Write:
    key: tuple[Key, str]
    resource: Resource
    obj: Mapping[str, Any]
    type_: str
    reason: str
    message: str


def timestamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_body(
    resource: Resource,
    obj: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    instance: str,
    now: str,
) -> dict[str, Any]:
    """A core/v1 Event about ``obj`` in its namespace, counted once."""
    meta = obj["metadata"]
    namespace = meta.get("namespace") or "default"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": type_,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "source": {"component": COMPONENT, "host": instance},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance,
        "metadata": {"namespace": namespace, "generateName": f"{meta['name']}."},
        "involvedObject": {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "name": meta["name"],
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
        },
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


class EventRecorder:
    """Records Events through ``api``, aggregating repeats; thread-safe (apply runs in a pool).

    A failed write is logged and forgotten: an Event is a courtesy, never a reason to fail a pass.
    """

    def __init__(
        self,
        api: EventApi,
        instance: str | None = None,
        *,
        repeat_seconds: float = REPEAT_SECONDS,
        max_entries: int = MAX_ENTRIES,
        max_queued: int = MAX_QUEUED,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.instance = (instance or os.environ.get("POD_NAME") or socket.gethostname())[:128]
        self.repeat_seconds = repeat_seconds
        self.max_entries = max_entries
        self.clock = clock
        self._told: OrderedDict[tuple[Key, str], _Told] = OrderedDict()
        self._lock = threading.Lock()
        self._writes: queue.Queue[_Write] = queue.Queue(maxsize=max_queued)
        self._writer: threading.Thread | None = None

    def record(
        self, resource: Resource, obj: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None:
        """Tell ``reason: message`` about ``obj``: a new Event, a count more, or nothing when
        the same was told less than ``repeat_seconds`` ago. Returns before the write."""
        message = message[:MESSAGE_LIMIT]
        meta = obj["metadata"]
        key = (
            (
                resource.api_version,
                resource.kind,
                f"{meta.get('namespace') or ''}/{meta['name']}",
                str(meta.get("uid") or ""),
                type_,
                reason,
            ),
            message,
        )
        now = self.clock()
        with self._lock:
            told = self._told.get(key)
            if told is not None and now - told.at < self.repeat_seconds:
                self._told.move_to_end(key)
                return
            # told from now on, so that a repeat before the write is dropped too
            self._told[key] = _Told(told.name if told else "", told.count if told else 0, now)
            self._told.move_to_end(key)
            while len(self._told) > self.max_entries:
                self._told.popitem(last=False)
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_all, name="events", daemon=True)
                self._writer.start()
        try:
            self._writes.put_nowait(_Write(key, resource, obj, type_, reason, message))
        except queue.Full:
            log.warning("event dropped: too many waiting", extra={"reason": reason})
            with self._lock:
                self._told.pop(key, None)

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every recorded Event is written (or failed); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._writes.all_tasks_done:
            while self._writes.unfinished_tasks:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._writes.all_tasks_done.wait(remaining)
        return True

    def _write_all(self) -> None:
        while True:
            write = self._writes.get()
            try:
                self._write_one(write)
            finally:
                self._writes.task_done()

    def _write_one(self, write: _Write) -> None:
        with self._lock:
            told = self._told.get(write.key)
        try:
            written = self._write(
                write.resource,
                write.obj,
                write.type_,
                write.reason,
                write.message,
                told if told is not None and told.name else None,
            )
        except KubeError as error:
            log.warning(
                "could not record event", extra={"reason": write.reason, "error": str(error)}
            )
            with self._lock:
                self._told.pop(write.key, None)
            return
        with self._lock:
            if write.key in self._told:  # not pushed out of the cache meanwhile
                self._told[write.key] = written

    def _write(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        told: _Told | None,
    ) -> _Told:
        """Patch the Event told before (count + 1); create one when there is none (any more)."""
        now = timestamp()
        namespace = obj["metadata"].get("namespace") or "default"
        if told is not None:
            try:
                self.api.patch(
                    EVENTS, namespace, told.name, {"count": told.count + 1, "lastTimestamp": now}
                )
                return _Told(told.name, told.count + 1, self.clock())
            except KubeError as error:
                if not error.not_found:
                    raise
        body = event_body(resource, obj, type_, reason, message, self.instance, now)
        created = self.api.create(EVENTS, body)
        return _Told(created["metadata"]["name"], 1, self.clock())
