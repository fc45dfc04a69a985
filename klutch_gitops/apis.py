"""The Klutch consumer protocol both wings speak: API resources, labels, annotations, names.

The bind API writes these objects and the reconciler reads and serves them; neither wing imports
the other, so what they share lives here.
"""

from __future__ import annotations

import hashlib

from klutch_gitops.kube.client import Resource

GROUP = "klutch.anynines.com"
API_SERVICE_NAMESPACES = Resource(GROUP, "v1alpha1", "apiservicenamespaces", "APIServiceNamespace")
API_SERVICE_EXPORTS = Resource(GROUP, "v1alpha1", "apiserviceexports", "APIServiceExport")
EXPORT_REQUESTS = Resource(GROUP, "v1alpha1", "apiserviceexportrequests", "APIServiceExportRequest")
CLUSTER_BINDINGS = Resource(GROUP, "v1alpha1", "clusterbindings", "ClusterBinding")
TEMPLATES = (
    Resource(
        "example-backend.klutch.anynines.com",
        "v1alpha1",
        "apiserviceexporttemplates",
        "APIServiceExportTemplate",
    ),
    Resource(GROUP, "v1alpha1", "apiserviceexporttemplates", "APIServiceExportTemplate"),
)
REPOSITORY_BINDINGS = Resource(
    "gitops.klutch.anynines.com", "v1alpha1", "repositorybindings", "RepositoryBinding"
)
# Cluster-scoped, like Klutch's (bind/pkg/apis/bind/v1alpha1/apiservicebinding_types.go).
API_SERVICE_BINDINGS = Resource(
    GROUP, "v1alpha1", "apiservicebindings", "APIServiceBinding", namespaced=False
)
# The Crossplane kinds of the Control Plane's catalog, which the platform repository publishes.
XRDS = Resource(
    "apiextensions.crossplane.io",
    "v1",
    "compositeresourcedefinitions",
    "CompositeResourceDefinition",
    namespaced=False,
)
COMPOSITIONS = Resource(
    "apiextensions.crossplane.io", "v1", "compositions", "Composition", namespaced=False
)
# Not a REST resource: every claim kind at once (Crossplane's ``claim`` category), as a refusal
# names it.
ALL_CLAIMS = Resource("", "", "claims")

# The consumer (its namespace on the Control Plane) an object belongs to: on the mapped namespaces
# and their RBAC (the namespace controller's ownership check, unbind, the claim-references policy
# select by it) and on the App Cluster objects klutch-bind writes (bind/relabel.py: the key they
# carried before). Klutch itself sets no consumer label: its mapped namespace carries only the
# annotation klutch.anynines.com/api-service-namespace (anynines/klutchio@0b4539e8,
# bind/contrib/example-backend/controllers/servicenamespace/servicenamespace_reconcile.go).
CONSUMER_LABEL = "klutch.anynines.com/consumer-namespace"
APP_NAMESPACE_LABEL = "klutch.anynines.com/app-namespace"
BINDER = "klutch-binder"
# Marks the Secrets holding a binder kubeconfig, so the reconciler finds the tokens it must renew.
BINDER_KUBECONFIG_LABEL = "klutch.anynines.com/binder-kubeconfig"
IDENTITY_ANNOTATION = "example-backend.klutch.anynines.com/identity"
# On the consumer namespace: the OIDC groups of the identity's last bind and the bind API's default
# allowed groups, as JSON. The Control Plane never sees the ID token, so this is what the
# ExportRequestController authorizes an export request created with the binder kubeconfig against.
BIND_GROUPS_ANNOTATION = "gitops.klutch.anynines.com/bind-groups"


def mapped_namespace(consumer: str, app_namespace: str) -> str:
    """``<consumer>-<app namespace>``, shortened with a stable hash to fit a DNS label (63)."""
    name = f"{consumer}-{app_namespace}"
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[:54].rstrip('-')}-{digest}"


# On a RepositoryBinding, settable by its tenant (``klutch-gitops reconcile|suspend|resume``):
# any new value of REQUESTED_AT asks for a fetch and a pass now, and the status answers it in
# ``lastHandledReconcileAt`` (Flux's ``reconcile.fluxcd.io/requestedAt``); SUSPEND "true" stops
# fetching, applying and writing back, like ``spec.suspend``, until it is removed or "false".
REQUESTED_AT_ANNOTATION = "gitops.klutch.anynines.com/requestedAt"
SUSPEND_ANNOTATION = "gitops.klutch.anynines.com/suspend"
# On every App claim the reconciler writes: the registration it comes from (klutch-gitops get
# claims lists by it).
REPOSITORY_LABEL = "gitops.klutch.anynines.com/repository"
# On a claim (in Git or on the live App object): never deleted by a prune; the reconciler copies it
# to the Control Plane copy, where the bind API refuses an unforced unbind that would delete it.
DELETION_PROTECTION = "gitops.klutch.anynines.com/deletion-protection"
