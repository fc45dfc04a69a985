"""What a binding creates for a consumer on the Control Plane.

A consumer namespace with the ServiceAccount ``klutch-binder``, a Role that lets it read its
APIServiceExports and request namespace mappings, APIServiceExports (CRD snapshots of the
Control Plane CRDs it may use), and a kubeconfig for the ServiceAccount from the TokenRequest API.
Everything is applied idempotently, so binding twice gives the same result.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client

from bind_api.namespaces import API_SERVICE_EXPORTS, BINDER, GROUP, binder_role
from klutch_gitops.crds import version_snapshot
from klutch_gitops.kube import NAMESPACES, Kube, Resource

FIELD_MANAGER = "klutch-gitops-bind"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
IDENTITY_ANNOTATION = "example-backend.klutch.anynines.com/identity"
TOKEN_SECONDS = 24 * 3600
# Marks the Secrets holding a binder kubeconfig, so the reconciler finds the tokens it must renew.
BINDER_KUBECONFIG_LABEL = "klutch.anynines.com/binder-kubeconfig"
PROVIDER_SECRETS = {
    "group": "",
    "resource": "secrets",
    "version": "v1",
    "selector": {"names": ["*"], "owner": "Provider"},
    "required": True,
}


def consumer_namespace(identity: str, cluster_id: str, prefix: str = "cluster") -> str:
    """``<prefix>-<stable hash>``: the same person and App Cluster always get the same one."""
    digest = hashlib.sha256(f"{identity}#{cluster_id}".encode()).hexdigest()[:10]
    return f"{prefix}-{digest}"


def export_from_crd(
    crd: Mapping[str, Any], claims: Iterable[Mapping[str, Any]] = (PROVIDER_SECRETS,)
) -> dict[str, Any]:
    """An APIServiceExport spec body: the CRD snapshot plus its permission claims."""
    spec = crd["spec"]
    return {
        "group": spec["group"],
        "names": spec["names"],
        "scope": spec.get("scope", "Namespaced"),
        "versions": [version_snapshot(version) for version in spec["versions"]],
        "permissionClaims": list(claims),
        "informerScope": "Namespaced",
        "clusterScopedIsolation": "Namespaced",
    }


CONSUMER_RULES = [
    # Read-only: the bind API answers the requests; kubectl bind only waits for their phase.
    {
        "apiGroups": [GROUP],
        "resources": ["apiserviceexports", "apiserviceexportrequests"],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": [GROUP],
        "resources": ["apiservicenamespaces"],
        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
    },
]


def consumer_objects(
    namespace: str, identity: str, crds: Iterable[Mapping[str, Any]]
) -> list[tuple[Resource, dict[str, Any]]]:
    """The consumer's namespace, ServiceAccount, Role, RoleBinding and APIServiceExports."""
    meta = {"name": BINDER, "namespace": namespace}
    objects: list[tuple[Resource, dict[str, Any]]] = [
        (
            NAMESPACES,
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace, "annotations": {IDENTITY_ANNOTATION: identity}},
            },
        ),
        (SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        *binder_role(namespace, namespace, CONSUMER_RULES),
    ]
    for crd in crds:
        objects.append(
            (
                API_SERVICE_EXPORTS,
                {
                    "apiVersion": API_SERVICE_EXPORTS.api_version,
                    "kind": "APIServiceExport",
                    "metadata": {"name": crd["metadata"]["name"], "namespace": namespace},
                    "spec": export_from_crd(crd),
                },
            )
        )
    return objects


def bind_consumer(
    admin: Kube, namespace: str, identity: str, crds: Iterable[Mapping[str, Any]]
) -> None:
    for resource, body in consumer_objects(namespace, identity, crds):
        admin.apply(resource, body, field_manager=FIELD_MANAGER, force=True)


def binder_token(admin: Kube, namespace: str, seconds: int = TOKEN_SECONDS) -> str:
    """A bounded TokenRequest token for ``klutch-binder``; the reconciler renews it in time."""
    return (
        client.CoreV1Api(admin.api)
        .create_namespaced_service_account_token(
            BINDER,
            namespace,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
            ),
        )
        .status.token
    )


def binder_kubeconfig(admin: Kube, namespace: str, seconds: int = TOKEN_SECONDS) -> dict[str, Any]:
    """A kubeconfig for ``klutch-binder`` with a bounded token, context namespace = consumer's."""
    token = binder_token(admin, namespace, seconds)
    configuration = admin.api.configuration
    with open(configuration.ssl_ca_cert, "rb") as ca:
        ca_data = base64.b64encode(ca.read()).decode()
    name = f"klutch-{namespace}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [
            {
                "name": name,
                "cluster": {"server": configuration.host, "certificate-authority-data": ca_data},
            }
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
    }
