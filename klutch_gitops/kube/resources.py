"""Kubernetes' own resources, the one place their group, version and plural are spelled.

Klutch's resources (and the Crossplane kinds of its Control Plane) live in ``klutch_gitops.apis``;
tests/unit/rules/test_package_rules.py keeps every fixed ``Resource(...)`` in one of these two
modules.
"""

from __future__ import annotations

from klutch_gitops.kube.client import Resource

_RBAC = "rbac.authorization.k8s.io"
_ADMISSION = "admissionregistration.k8s.io"

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SECRETS = Resource("", "v1", "secrets", "Secret")
EVENTS = Resource("", "v1", "events", "Event")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
CRDS = Resource(
    "apiextensions.k8s.io",
    "v1",
    "customresourcedefinitions",
    "CustomResourceDefinition",
    namespaced=False,
)
ROLES = Resource(_RBAC, "v1", "roles", "Role")
ROLE_BINDINGS = Resource(_RBAC, "v1", "rolebindings", "RoleBinding")
CLUSTER_ROLES = Resource(_RBAC, "v1", "clusterroles", "ClusterRole", namespaced=False)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
VALIDATING_ADMISSION_POLICIES = Resource(
    _ADMISSION, "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy", namespaced=False
)
VALIDATING_ADMISSION_POLICY_BINDINGS = Resource(
    _ADMISSION,
    "v1",
    "validatingadmissionpolicybindings",
    "ValidatingAdmissionPolicyBinding",
    namespaced=False,
)
