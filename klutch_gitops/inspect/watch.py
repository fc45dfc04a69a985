"""``-w``: the list first, then each change as one more row, until interrupted. kubectl prints the
same way: the table with its header, then a row per event without one
(k8s.io/kubectl/pkg/cmd/get/get.go, watch(): "print the current object" then each event)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from klutch_gitops.kube.client import Kube, KubeError, Resource


def changes(
    kube: Kube,
    resource: Resource,
    namespace: str | None,
    resource_version: str,
    label_selector: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Every changed object (added, modified, deleted) after ``resource_version``, for ever.

    A closed watch resumes where it ended; a 410 Gone (history compacted) relists and yields
    what the list holds, as client-go's reflector does (tools/cache/reflector.go)."""
    version = resource_version
    while True:
        try:
            for kind, obj in kube.watch(resource, namespace, version, label_selector):
                version = obj["metadata"].get("resourceVersion", version)
                if kind != "BOOKMARK":
                    yield obj
        except KubeError as error:
            if error.status != 410:
                raise
            items, version = kube.list(resource, namespace, label_selector)
            yield from items


def merged_changes(
    kube: Kube,
    versions: Mapping[Resource, str],
    namespace: str | None,
    label_selector: str | None = None,
) -> Iterator[dict[str, Any]]:
    """``changes`` of several kinds (the claim kinds) as they arrive, one watching thread per
    kind, each object with its apiVersion and kind; the first failing watch ends it."""
    arrived: queue.Queue[dict[str, Any] | BaseException] = queue.Queue()

    def follow(resource: Resource, version: str) -> None:
        try:
            for obj in changes(kube, resource, namespace, version, label_selector):
                arrived.put({"apiVersion": resource.api_version, "kind": resource.kind, **obj})
        except BaseException as error:  # handed to the reader, which raises it
            arrived.put(error)

    for resource, version in versions.items():
        threading.Thread(target=follow, args=(resource, version), daemon=True).start()
    while versions:
        found = arrived.get()
        if isinstance(found, BaseException):
            raise found
        yield found
