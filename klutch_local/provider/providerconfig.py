"""ProviderConfig usage: ``status.users`` and the ``in-use.crossplane.io`` finalizer.

A managed resource needs its ProviderConfig to the end, to drop what it made; so, as Crossplane
does, a ProviderConfig that managed resources still name is not let go until the last of them is
gone. Users are counted from the managed reconcilers' caches, and every event of a managed
resource requeues the ProviderConfig it names. One controller per kind: the cluster
ProviderConfig, and Crossplane 2's namespaced ProviderConfig and ClusterProviderConfig.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.informer import Informer
from klutch_gitops.kube.workqueue import WorkQueue, run_workers
from klutch_local.provider.api import (
    FIELD_MANAGER,
    IN_USE_FINALIZER,
    ProviderConfigRef,
)


def finalizers_for(meta: dict[str, Any], users: int) -> list[str] | None:
    """The finalizers ``meta`` should have, or None when they are right already."""
    finalizers = list(meta.get("finalizers") or [])
    keep = users > 0 or not meta.get("deletionTimestamp")
    if keep == (IN_USE_FINALIZER in finalizers):
        return None
    return (
        [*finalizers, IN_USE_FINALIZER]
        if keep
        else [f for f in finalizers if f != IN_USE_FINALIZER]
    )


class ProviderConfigController:
    def __init__(
        self, kube: Kube, resource: Resource, users: Callable[[ProviderConfigRef], int]
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.users = users
        self.queue: WorkQueue[ProviderConfigRef] = WorkQueue()
        self.name = f"{resource.plural}.{resource.group}"
        self.informer = Informer(kube, resource, self._on_event, name=self.name)

    def start(self) -> ProviderConfigController:
        self.informer.start()
        run_workers(self.queue, self.reconcile, 1, self.name)
        return self

    def stop(self) -> None:
        self.informer.stop()
        self.queue.shutdown()

    def _on_event(self, event: str, obj: dict[str, Any]) -> None:
        if event != "DELETED":
            meta = obj["metadata"]
            self.queue.add(ProviderConfigRef(self.resource, meta.get("namespace"), meta["name"]))

    def reconcile(self, ref: ProviderConfigRef) -> None:
        provider_config = self.kube.get(self.resource, ref.namespace, ref.name)
        if provider_config is None:
            return
        meta = provider_config["metadata"]
        users = self.users(ref)
        if (provider_config.get("status") or {}).get("users") != users:
            where = {"namespace": ref.namespace} if ref.namespace else {}
            provider_config = self.kube.apply(
                self.resource,
                {
                    "apiVersion": self.resource.api_version,
                    "kind": self.resource.kind,
                    "metadata": {"name": ref.name, **where},
                    "status": {"users": users},
                },
                field_manager=FIELD_MANAGER,
                force=True,
                subresource="status",
            )
            meta = provider_config["metadata"]
        finalizers = finalizers_for(meta, users)
        if finalizers is not None:
            self.kube.patch(
                self.resource,
                ref.namespace,
                ref.name,
                {
                    "metadata": {
                        "finalizers": finalizers,
                        "resourceVersion": meta["resourceVersion"],
                    }
                },
            )
