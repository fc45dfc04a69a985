"""List-and-watch one resource into a cache and report every change, like client-go's informer.

A watch that breaks is resumed from the last resourceVersion; one that is too old (410 Gone) is
replaced by a fresh list, and objects that vanished meanwhile are reported as deleted. Handlers
only enqueue work: they run on the informer's thread and must be quick.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

from klutch_gitops.kube.client import Kube, KubeError, Resource

log = logging.getLogger(__name__)

Handler = Callable[[str, dict[str, Any]], None]  # (ADDED | MODIFIED | DELETED, object)
Transform = Callable[
    [dict[str, Any]], dict[str, Any]
]  # what the cache keeps of an object, like client-go's SetTransform

LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# Strings at most this long are interned: kinds, apiVersions, namespaces, label and condition keys
# repeat in every cached object; values longer than this (Secret data, messages) rarely do.
INTERN_MAX = 64


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def managers(managed_fields: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """managedFields as the cache keeps them: who manages the object (manager, operation,
    subresource), not which fields. The field sets are most of an object's size; deciding
    whose bookkeeping a label is (reconciler.sync.objects.mirrored_body) needs only the managers.
    Never write these entries back: a managedFields patch needs a fresh GET's."""
    return [
        {k: entry[k] for k in ("manager", "operation", "subresource") if k in entry}
        for entry in managed_fields or []
    ]


def cut_managed_fields(obj: dict[str, Any]) -> dict[str, Any]:
    """Every informer's least transform: managedFields cut to their managers (``managers``)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict) and "managedFields" in meta:
        meta["managedFields"] = managers(meta["managedFields"])
    return obj


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as a cache keeps it: managedFields cut to their managers, no
    creationTimestamp (no decision reads it), repeated strings shared.

    Everything else stays: the stages compare spec (objects.needs_apply, as a subset of the
    desired body), mirror spec and status, and read labels, annotations, finalizers, uid,
    generation, resourceVersion, deletionTimestamp and ownerReferences."""
    meta = cut_managed_fields(obj).get("metadata")
    if isinstance(meta, dict):
        meta.pop("creationTimestamp", None)
    slimmed: dict[str, Any] = interned(obj)
    return slimmed


def slim_copy(obj: dict[str, Any]) -> dict[str, Any]:
    """``slim`` without kubectl's last-applied annotation (a whole second copy of the object),
    for caches whose objects are only compared with bodies we build: Control Plane copies
    (objects.control_plane_body never sets it) and Secrets (objects.secret_copy). App claims
    keep it: a Git document may carry it, and needs_apply compares the App copy with Git's."""
    annotations = (obj.get("metadata") or {}).get("annotations")
    if isinstance(annotations, dict):
        annotations.pop(LAST_APPLIED, None)
    return slim(obj)


def interned(value: Any) -> Any:
    """``value`` rebuilt with its dict keys and short strings interned: json.loads makes new
    strings for every watch event, so 10,000 cached claims would each hold their own
    "apiVersion", kind, namespace, label values and condition types."""
    if isinstance(value, dict):
        return {
            sys.intern(key) if isinstance(key, str) else key: interned(item)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [interned(item) for item in value]
    if isinstance(value, str) and len(value) <= INTERN_MAX:
        return sys.intern(value)
    return value


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
        transform: Transform = cut_managed_fields,
        page_size: int | None = None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.handler = handler
        self.transform = transform
        self.page_size = page_size  # list in pages, each transformed before the next is read
        self.name = name or f"informer-{resource.plural}-{namespace or 'all'}"
        self.cache: dict[tuple[str, str], dict[str, Any]] = {}
        self.synced = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)

    def start(self) -> Informer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self.cache.get((namespace, name))

    def items(self) -> list[dict[str, Any]]:
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
        if self.page_size:
            items, resource_version = self.kube.list(
                self.resource,
                self.namespace,
                self.label_selector,
                limit=self.page_size,
                each=self.transform,
            )
        else:
            items, resource_version = self.kube.list(
                self.resource, self.namespace, self.label_selector
            )
            items = [self.transform(obj) for obj in items]
        fresh = {object_key(obj): obj for obj in items}
        with self._lock:
            gone = [obj for key, obj in self.cache.items() if key not in fresh]
        for obj in gone:
            self._store("DELETED", obj)
        for obj in items:
            self._store("ADDED", obj)
        self.synced.set()
        return resource_version

    def _apply(self, event_type: str, obj: dict[str, Any]) -> None:
        self._store(event_type, self.transform(obj))

    def _store(self, event_type: str, obj: dict[str, Any]) -> None:
        with self._lock:
            if event_type == "DELETED":
                self.cache.pop(object_key(obj), None)
            else:
                self.cache[object_key(obj)] = obj
        try:
            self.handler(event_type, obj)
        except Exception:
            log.exception("informer handler failed", extra={"informer": self.name})
