"""Informers shared by every registration that watches the same thing with the same identity.

A registration used to run its own informers (a thread, a watch connection and a cache each) for
every kind, Secret and mapped namespace, so memory and watches grew with repositories, kinds and
namespaces. Here one informer serves every subscriber whose (identity, resource, namespace,
selector) is the same: the App Cluster's claims of one kind for all repositories on that cluster,
selected by our repository label and routed by its value; a tenant's Control Plane namespace for
that tenant's registrations only, since the identity (``Kube.identity``: a digest of the resolved
kubeconfig) is part of the key. A registration restarted with other credentials gets another key,
so it never reads through a cache filled with the old ones. The last subscriber to leave stops the
informer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.informer import Handler, Informer, Transform, object_key, slim

log = logging.getLogger(__name__)

Key = tuple[str, str]  # (namespace, name)
# What makes two subscriptions share an informer: identity, resource, namespace, selector, the
# label routed by, transform.
SharedKey = tuple[str, Resource, str | None, str | None, str | None, Transform]
# A shared informer lists every repository's objects: in pages of this many (client-go's pager
# default), each slimmed before the next is read, so a relist never holds all of them whole.
LIST_PAGE_SIZE = 500


@dataclass(frozen=True)
class Route:
    """Deliver only the objects whose label ``label`` says ``value`` (and their events)."""

    label: str
    value: str


def _route_of(label: str, obj: dict[str, Any]) -> str | None:
    return ((obj.get("metadata") or {}).get("labels") or {}).get(label)


class SharedInformer:
    """One informer and its subscribers; routed ones see only their label value's objects."""

    def __init__(self, informer_of: Callable[[Handler], Informer], label: str | None) -> None:
        self.label = label
        self.subscribers: list[Subscription] = []
        self._routes: dict[Key, str] = {}  # object -> the label value it was indexed under
        self._index: dict[str, dict[Key, dict[str, Any]]] = {}  # label value -> its objects
        self._lock = threading.Lock()
        self.informer = informer_of(self._dispatch)

    @property
    def synced(self) -> threading.Event:
        return self.informer.synced

    def get(self, route: str | None, namespace: str, name: str) -> dict[str, Any] | None:
        if route is None:
            return self.informer.get(namespace, name)
        with self._lock:
            return self._index.get(route, {}).get((namespace, name))

    def items(self, route: str | None) -> list[dict[str, Any]]:
        if route is None:
            return self.informer.items()
        with self._lock:
            return list(self._index.get(route, {}).values())

    def _dispatch(self, event: str, obj: dict[str, Any]) -> None:
        """Index the object under its label value and tell the subscribers it concerns: the
        value's (and the previous value's, when the label changed: it lost the object)."""
        concerned = {None} if self.label is None else self._reindex(event, obj)
        with self._lock:
            targets = [s for s in self.subscribers if s.route in concerned]
        for subscriber in targets:
            try:
                subscriber.handler(event, obj)
            except Exception:
                log.exception("informer handler failed", extra={"informer": self.informer.name})

    def _reindex(self, event: str, obj: dict[str, Any]) -> set[str | None]:
        assert self.label is not None
        key = object_key(obj)
        new = None if event == "DELETED" else _route_of(self.label, obj)
        with self._lock:
            old = self._routes.pop(key, None)
            if old is not None:
                bucket = self._index.get(old, {})
                bucket.pop(key, None)
                if not bucket:
                    self._index.pop(old, None)
            if new is not None:
                self._routes[key] = new
                self._index.setdefault(new, {})[key] = obj
        return {old, new} - {None}


class Subscription:
    """What one registration holds of a shared informer: the cache's interface (``synced``,
    ``get``, ``items``), limited to its route, and ``stop``, which releases its interest."""

    def __init__(
        self,
        registry: Caches,
        key: SharedKey,
        shared: SharedInformer,
        route: str | None,
        handler: Handler,
    ) -> None:
        self.registry = registry
        self.key = key
        self.shared = shared
        self.route = route
        self.handler = handler
        self.stopped = False

    @property
    def synced(self) -> threading.Event:
        return self.shared.synced

    @property
    def name(self) -> str:
        return self.shared.informer.name

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.shared.get(self.route, namespace, name)

    def items(self) -> list[dict[str, Any]]:
        return self.shared.items(self.route)

    def stop(self) -> None:
        self.registry.release(self)


class Caches:
    """The informers of one process, shared by key; one registry per ``Resolver``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shared: dict[SharedKey, SharedInformer] = {}
        self._started = 0  # numbers the informers' names: an identity is a secret's digest

    def subscribe(
        self,
        kube: Kube,
        resource: Resource,
        handler: Handler,
        *,
        namespace: str | None = None,
        route: Route | None = None,
        label_selector: str | None = None,
        transform: Transform = slim,
    ) -> Subscription:
        """Interest in ``resource`` (in ``namespace``, or everywhere) as ``kube`` may see it.

        With a ``route`` the informer selects every object carrying the route's label and the
        subscription sees those whose value is the route's; without one it sees everything the
        informer selects (``label_selector``)."""
        selector = route.label if route is not None else label_selector
        label = route.label if route is not None else None
        key: SharedKey = (kube.identity, resource, namespace, selector, label, transform)
        with self._lock:
            shared = self._shared.get(key)
            if shared is None:
                self._started += 1
                shared = SharedInformer(
                    lambda dispatch: Informer(
                        kube,
                        resource,
                        dispatch,
                        namespace=namespace,
                        label_selector=selector,
                        name=f"shared-{resource.plural}-{namespace or 'all'}-{self._started}",
                        transform=transform,
                        page_size=LIST_PAGE_SIZE,
                    ),
                    label,
                )
                self._shared[key] = shared
                shared.informer.start()
            subscription = Subscription(self, key, shared, route.value if route else None, handler)
            shared.subscribers.append(subscription)
        return subscription

    def release(self, subscription: Subscription) -> None:
        """Drop a subscriber; the last one's leaving stops the informer."""
        with self._lock:
            if subscription.stopped:
                return
            subscription.stopped = True
            shared = subscription.shared
            shared.subscribers = [s for s in shared.subscribers if s is not subscription]
            if shared.subscribers:
                return
            if self._shared.get(subscription.key) is shared:
                del self._shared[subscription.key]
        shared.informer.stop()

    def informers(self) -> list[Informer]:
        """The running informers (one thread and watch each), for tests and metrics."""
        with self._lock:
            return [s.informer for s in self._shared.values()]
