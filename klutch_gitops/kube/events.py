"""Events that aggregate like client-go's recorder, so ``kubectl describe`` stays readable.

The same Event (involved object, type, reason, message) told again is not a new object: its
``count`` and ``lastTimestamp`` are patched, as client-go's EventCorrelator does (eventObserve in
kubernetes/client-go tools/record/events_cache.go, keyed like its getEventKey, with an LRU of
4096 entries like its maxLruCacheEntries). A repeat within ``repeat_seconds`` (5 minutes, the
refill rate of that file's spam filter, defaultSpamQPS = 1/300) is dropped: a standing situation
that a pass finds every few seconds adds one count per five minutes, not one per pass. When the
Event is gone (expired after the apiserver's --event-ttl, or deleted) it is created again.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from klutch_gitops.kube.client import EVENTS, KubeError, Resource

log = logging.getLogger(__name__)

COMPONENT = "klutch-gitops"
NORMAL, WARNING = "Normal", "Warning"
MAX_ENTRIES = 4096
REPEAT_SECONDS = 300.0
MESSAGE_LIMIT = 1024

Key = tuple[str, str, str, str, str, str]  # (apiVersion, kind, namespace/name, uid, type, reason)


class EventApi(Protocol):
    """The calls the recorder makes (``klutch_gitops.kube.client.Kube`` has them)."""

    def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict: ...

    def patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> dict: ...


@dataclass
class _Told:
    name: str  # the Event object's name
    count: int
    at: float  # monotonic time of the last write


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
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.instance = (instance or os.environ.get("POD_NAME") or socket.gethostname())[:128]
        self.repeat_seconds = repeat_seconds
        self.max_entries = max_entries
        self.clock = clock
        self._told: OrderedDict[tuple[Key, str], _Told] = OrderedDict()
        self._lock = threading.Lock()

    def record(
        self, resource: Resource, obj: Mapping[str, Any], type_: str, reason: str, message: str
    ) -> None:
        """Tell ``reason: message`` about ``obj``: a new Event, a count more, or nothing when
        the same was told less than ``repeat_seconds`` ago."""
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
            if told is not None:
                told.at = now  # a concurrent teller of the same finds it told
        try:
            written = self._write(resource, obj, type_, reason, message, told)
        except KubeError as error:
            log.warning("could not record event", extra={"reason": reason, "error": str(error)})
            with self._lock:
                self._told.pop(key, None)
            return
        with self._lock:
            self._told[key] = written
            self._told.move_to_end(key)
            while len(self._told) > self.max_entries:
                self._told.popitem(last=False)

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
