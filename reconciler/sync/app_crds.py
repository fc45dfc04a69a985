"""The App Cluster CRD of an APIServiceExport, and whose CRD the reconciler may update.

One ownership model with Klutch: a CRD is ours when we made it, or when Klutch's konnector made it
for the same APIServiceBinding; another foreign CRD is left as it is. Pure decisions, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from klutch_gitops.kube.crds import version_snapshot
from reconciler.sync.objects import BOUND_ANNOTATION

SERVICE_BINDING_API_VERSION = "klutch.anynines.com/v1alpha1"


def crd_from_export(
    export: Mapping[str, Any], binding: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The App Cluster CRD for an APIServiceExport (a CRD snapshot), marked as ours.

    With the App Cluster's APIServiceBinding of the same name, the CRD also carries the owner
    reference Klutch's konnector puts on the CRDs it creates (``ensureCRDs`` in
    anynines/klutchio bind/pkg/konnector/controllers/cluster/servicebinding/
    servicebinding_reconcile.go), so the konnector accepts our CRD instead of reporting
    ``ForeignCustomResourceDefinition``.
    """
    spec = export["spec"]
    versions = []
    for version in spec.get("versions") or []:
        entry = version_snapshot(version)
        entry.setdefault("subresources", {"status": {}})
        versions.append(entry)
    metadata: dict[str, Any] = {
        "name": export["metadata"]["name"],
        "labels": {"app.kubernetes.io/managed-by": "klutch-gitops"},
        "annotations": {BOUND_ANNOTATION: "true"},
    }
    if binding is not None and not binding["metadata"].get("deletionTimestamp"):
        # never to a binding being deleted: `kubectl delete apiservicebinding --cascade=orphan`
        # has the garbage collector drop the reference, and putting it back would have the CRD,
        # and every claim of its kind, collected once the binding is gone
        metadata["ownerReferences"] = [binding_owner_reference(binding)]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": {
            "group": spec["group"],
            "names": spec["names"],
            "scope": spec.get("scope", "Namespaced"),
            "versions": versions,
        },
    }


def binding_owner_reference(binding: Mapping[str, Any]) -> dict[str, Any]:
    """The owner reference the konnector puts on a CRD: its APIServiceBinding, as controller."""
    meta = binding["metadata"]
    return {
        "apiVersion": SERVICE_BINDING_API_VERSION,
        "kind": "APIServiceBinding",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def owned_by_binding(crd: Mapping[str, Any], binding: Mapping[str, Any]) -> bool:
    """Klutch's ``IsOwnedByBinding`` (bind/pkg/apis/bind/v1alpha1/helpers/crd.go): an owner
    reference of group klutch.anynines.com, kind APIServiceBinding, the binding's name and uid."""
    meta = binding["metadata"]
    for ref in crd["metadata"].get("ownerReferences") or []:
        group = str(ref.get("apiVersion", "")).split("/", 1)[0]
        if group != SERVICE_BINDING_API_VERSION.split("/", 1)[0]:
            continue
        if ref.get("kind") != "APIServiceBinding" or ref.get("name") != meta["name"]:
            continue
        if not meta.get("uid") or ref.get("uid") == meta["uid"]:
            return True
    return False


def owns_crd(crd: Mapping[str, Any] | None, binding: Mapping[str, Any] | None = None) -> bool:
    """A CRD we may update: absent, created by us, or created by the konnector for the same
    APIServiceBinding (one ownership model with Klutch); never another foreign CRD."""
    if crd is None:
        return True
    labels = crd["metadata"].get("labels") or {}
    if labels.get("app.kubernetes.io/managed-by") == "klutch-gitops":
        return True
    return binding is not None and owned_by_binding(crd, binding)
