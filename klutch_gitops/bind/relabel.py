"""The App Cluster objects of earlier binds, given the consumer label they lacked.

Earlier versions of ``klutch-bind`` labelled the kubeconfig Secret and the APIServiceBindings
it writes ``klutch.anynines.com/consumer``, while the Control Plane's mapped namespaces carried
``klutch.anynines.com/consumer-namespace`` (apis.CONSUMER_LABEL) for the same consumer: one
concept, two keys. Every bind now adds CONSUMER_LABEL, with the old label's value, to the objects
that carry only the old one. The old label stays: the files ``--gitops-out`` wrote hold it, and
taking it away would make the GitOps controller that applies them see drift; the next bind of the
same consumer drops it, as server-side apply removes what its manager no longer sets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from klutch_gitops.apis import API_SERVICE_BINDINGS, CONSUMER_LABEL
from klutch_gitops.bind.client import BIND_NAMESPACE
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.resources import SECRETS

OLD_CONSUMER_LABEL = "klutch.anynines.com/consumer"


def label_patch(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch that gives ``obj`` CONSUMER_LABEL, or None when it needs none."""
    labels = obj.get("metadata", {}).get("labels") or {}
    if OLD_CONSUMER_LABEL not in labels or CONSUMER_LABEL in labels:
        return None
    return {"metadata": {"labels": {CONSUMER_LABEL: labels[OLD_CONSUMER_LABEL]}}}


def relabel(kube: Kube) -> list[str]:
    """Patch the old-labelled Secrets in ``klutch-bind`` and APIServiceBindings; returns
    ``kind/name`` of each patched. A kind the cluster lacks, or the caller may not list or patch,
    is left as it is: nothing on the App Cluster selects by the label, so no bind fails for it."""
    patched = []
    for resource, namespace in ((SECRETS, BIND_NAMESPACE), (API_SERVICE_BINDINGS, None)):
        try:
            items, _ = kube.list(resource, namespace, label_selector=OLD_CONSUMER_LABEL)
            for obj in items:
                if (patch := label_patch(obj)) is not None:
                    kube.patch(resource, namespace, obj["metadata"]["name"], patch)
                    patched.append(f"{resource.kind}/{obj['metadata']['name']}")
        except KubeError:
            continue
    return patched
