"""List-and-watch one resource into a cache and report every change, like client-go's informer.

A watch that breaks is resumed from the last resourceVersion; one that is too old (410 Gone) is
replaced by a fresh list, and objects that vanished meanwhile are reported as deleted. Handlers
only enqueue work: they run on the informer's thread and must be quick.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from klutch_gitops.kube.client import Kube, KubeError, Resource

log = logging.getLogger(__name__)

Handler = Callable[[str, dict], None]  # (ADDED | MODIFIED | DELETED, object)


def object_key(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def managers(managed_fields: list[dict] | None) -> list[dict]:
    """managedFields as the cache keeps them: who manages the object (manager, operation,
    subresource), not which fields. The field sets are most of an object's size; deciding
    whose bookkeeping a label is (reconciler.sync.objects.mirrored_body) needs only the managers.
    Never write these entries back: a managedFields patch needs a fresh GET's."""
    return [
        {k: entry[k] for k in ("manager", "operation", "subresource") if k in entry}
        for entry in managed_fields or []
    ]


class Informer:
    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        handler: Handler,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        name: str = "",
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.handler = handler
        self.name = name or f"informer-{resource.plural}-{namespace or 'all'}"
        self.cache: dict[tuple[str, str], dict] = {}
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def get(self, namespace: str, name: str) -> dict | None:
        with self._lock:
            return self.cache.get((namespace, name))

    def items(self) -> list[dict]:
        with self._lock:
            return list(self.cache.values())

    def _run(self) -> None:
        backoff = 0.5
        resource_version = ""
        while not self._stop.is_set():
            try:
                if not resource_version:
                    resource_version = self._relist()
                for event_type, obj in self.kube.watch(
                    self.resource,
                    self.namespace,
                    resource_version,
                    self.label_selector,
                    timeout_seconds=240,
                ):
                    if self._stop.is_set():
                        return
                    resource_version = obj["metadata"].get("resourceVersion", resource_version)
                    if event_type != "BOOKMARK":
                        self._apply(event_type, obj)
                backoff = 0.5
            except KubeError as error:
                if error.status == 410:
                    resource_version = ""  # too old: start over from a list
                    continue
                log.warning("watch failed", extra={"informer": self.name, "error": str(error)})
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
            except Exception as error:  # connection reset, server restart, timeouts
                log.warning("watch broke", extra={"informer": self.name, "error": repr(error)})
                resource_version = ""
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)

    def _relist(self) -> str:
        items, resource_version = self.kube.list(self.resource, self.namespace, self.label_selector)
        fresh = {object_key(obj): obj for obj in items}
        with self._lock:
            gone = [obj for key, obj in self.cache.items() if key not in fresh]
        for obj in gone:
            self._apply("DELETED", obj)
        for obj in items:
            self._apply("ADDED", obj)
        self.synced.set()
        return resource_version

    def _apply(self, event_type: str, obj: dict) -> None:
        meta = obj.get("metadata") or {}
        if "managedFields" in meta:
            meta["managedFields"] = managers(meta["managedFields"])
        with self._lock:
            if event_type == "DELETED":
                self.cache.pop(object_key(obj), None)
            else:
                self.cache[object_key(obj)] = obj
        try:
            self.handler(event_type, obj)
        except Exception:
            log.exception("informer handler failed", extra={"informer": self.name})
