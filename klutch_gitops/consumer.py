"""What a binding creates for a consumer on the Control Plane.

A consumer namespace with the ServiceAccount ``klutch-binder``, a Role that lets it do in that
namespace what Klutch's kubectl-bind does (create and watch its export requests, read its exports
and ClusterBinding, request namespace mappings), a RoleBinding of the ClusterRole
``klutch-binder-consumer`` for what Klutch's konnector reads there (this namespace's object and
its Secrets, as Klutch's binder may), APIServiceExports (CRD snapshots of the Control Plane CRDs
it may use), and a kubeconfig for the ServiceAccount from the TokenRequest API.
The consumer namespace also holds a RepositoryBinding's App kubeconfig and Git credentials: the
tenant's own, readable with its binder kubeconfig as with Klutch's, never another tenant's.
Everything is applied idempotently, so binding twice gives the same result.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from kubernetes import client

from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    BIND_GROUPS_ANNOTATION,
    BINDER,
    GROUP,
    IDENTITY_ANNOTATION,
    REPOSITORY_BINDINGS,
)
from klutch_gitops.binder_roles import CONSUMER_ROLE, ensure_cluster_role, role_binding
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.crds import version_snapshot
from klutch_gitops.kube.resources import NAMESPACES, ROLE_BINDINGS, ROLES, SERVICE_ACCOUNTS

FIELD_MANAGER = "klutch-gitops-bind"
TOKEN_SECONDS = 24 * 3600
NAME_CHARACTERS = 26  # lowercase base32: 5 bits each, 130 in all
PROVIDER_SECRETS = {
    "group": "",
    "resource": "secrets",
    "version": "v1",
    "selector": {"names": ["*"], "owner": "Provider"},
    "required": True,
}


def identity_of(subject: str, cluster_id: str) -> str:
    """The identity annotation's value: ``<OIDC subject>#<cluster ID>``.

    A cluster ID never contains ``#`` (the bind API refuses it), so the last ``#`` splits the value
    unambiguously, whatever the subject holds.
    """
    return f"{subject}#{cluster_id}"


def owner_of(identity: str) -> tuple[str, str]:
    """``(subject, cluster ID)`` of an identity annotation's value."""
    subject, _, cluster_id = identity.rpartition("#")
    return subject, cluster_id


def consumer_namespace(subject: str, cluster_id: str, prefix: str = "cluster") -> str:
    """``<prefix>-<26 base32 characters>``: 130 bits of SHA-256 of the identity.

    The same person and App Cluster always get the same name, and nobody can find an identity of
    their own that lands on someone else's name. 26 characters leave the mapped namespaces
    ``<consumer>-<App namespace>`` room within the 63 of a DNS label.
    """
    digest = hashlib.sha256(identity_of(subject, cluster_id).encode()).digest()
    return f"{prefix}-{base64.b32encode(digest).decode().lower()[:NAME_CHARACTERS]}"


def legacy_consumer_namespace(subject: str, cluster_id: str, prefix: str = "cluster") -> str:
    """The name before 130 bits (40 bits, 10 hex digits): kept by consumers bound under it."""
    digest = hashlib.sha256(identity_of(subject, cluster_id).encode()).hexdigest()
    return f"{prefix}-{digest[:10]}"


def identity_annotation(namespace: Mapping[str, Any] | None) -> str | None:
    """The identity a namespace was made for, or None for one that is not a consumer's."""
    if namespace is None:
        return None
    return (namespace["metadata"].get("annotations") or {}).get(IDENTITY_ANNOTATION)


def bind_groups(groups: Iterable[str], default: Iterable[str]) -> str:
    """The annotation's value: the caller's groups and the default allowed groups."""
    return json.dumps({"groups": sorted(set(groups)), "defaultAllowedGroups": sorted(set(default))})


def recorded_groups(namespace: Mapping[str, Any] | None) -> tuple[list[str], list[str]] | None:
    """``(groups, default allowed groups)`` recorded at the last bind, or None when none was."""
    raw = ((namespace or {}).get("metadata", {}).get("annotations") or {}).get(
        BIND_GROUPS_ANNOTATION
    )
    try:
        value: Any = json.loads(raw) if raw else None
        groups, default = value["groups"], value["defaultAllowedGroups"]
    except (ValueError, TypeError, KeyError):
        return None
    if not all(
        isinstance(g, list) and all(isinstance(x, str) for x in g) for g in (groups, default)
    ):
        return None
    return groups, default


def binder_role(
    namespace: str, consumer: str, rules: list[dict[str, Any]], labels: dict[str, str] | None = None
) -> list[tuple[Resource, dict[str, Any]]]:
    """A Role named ``klutch-binder`` in ``namespace``, bound to the consumer's ServiceAccount."""
    meta = {"name": BINDER, "namespace": namespace, **({"labels": labels} if labels else {})}
    return [
        (
            ROLES,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": rules,
            },
        ),
        (
            ROLE_BINDINGS,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": BINDER,
                },
                "subjects": [{"kind": "ServiceAccount", "name": BINDER, "namespace": consumer}],
            },
        ),
    ]


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
    # kubectl-bind creates its own request with this kubeconfig and polls its phase (klutchio
    # bind/pkg/kubectl/bind-apiservice/plugin/serviceexportrequest.go); the reconciler's
    # ExportRequestController answers it. No update or delete: spec.resources is immutable and a
    # request is only ever replaced by binding again.
    {
        "apiGroups": [GROUP],
        "resources": ["apiserviceexportrequests"],
        "verbs": ["get", "list", "watch", "create"],
    },
    {
        "apiGroups": [GROUP],
        "resources": ["apiserviceexports", "clusterbindings"],
        "verbs": ["get", "list", "watch"],
    },
    # Klutch's konnector commits its heartbeat to the ClusterBinding's status and the CRD's
    # conditions to each export's status, each a merge patch of the status subresource
    # (klutchio bind/pkg/konnector/controllers/cluster/clusterbinding/clusterbinding_controller.go
    # and serviceexport/serviceexport_reconcile.go); nothing of ours reads either status.
    {
        "apiGroups": [GROUP],
        "resources": ["apiserviceexports/status", "clusterbindings/status"],
        "verbs": ["patch"],
    },
    {
        "apiGroups": [GROUP],
        "resources": ["apiservicenamespaces"],
        "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"],
    },
    # The tenant reads its RepositoryBindings' status (klutch-gitops get, klutch-bind status) and
    # steers them by annotation (klutch-gitops reconcile|suspend|resume). patch reaches spec too:
    # the admission policy catalog/policies/repositorybinding-steering.yaml holds this
    # ServiceAccount to metadata.annotations. No create or delete: the bind API registers and
    # removes bindings.
    {
        "apiGroups": [REPOSITORY_BINDINGS.group],
        "resources": [REPOSITORY_BINDINGS.plural],
        "verbs": ["get", "list", "watch", "patch"],
    },
]


def namespace_object(namespace: str, identity: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": namespace, "annotations": {IDENTITY_ANNOTATION: identity}},
    }


def consumer_objects(
    namespace: str, identity: str, crds: Iterable[Mapping[str, Any]]
) -> list[tuple[Resource, dict[str, Any]]]:
    """The consumer's namespace, ServiceAccount, Role, RoleBinding and APIServiceExports."""
    return [
        (NAMESPACES, namespace_object(namespace, identity)),
        *namespaced_objects(namespace, crds),
    ]


def namespaced_objects(
    namespace: str, crds: Iterable[Mapping[str, Any]]
) -> list[tuple[Resource, dict[str, Any]]]:
    """What goes into a consumer namespace once it is known to be the consumer's."""
    meta = {"name": BINDER, "namespace": namespace}
    objects: list[tuple[Resource, dict[str, Any]]] = [
        (SERVICE_ACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta}),
        *binder_role(namespace, namespace, CONSUMER_RULES),
        (ROLE_BINDINGS, role_binding(namespace, CONSUMER_ROLE, namespace)),
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
    ensure_cluster_role(admin, CONSUMER_ROLE)
    for resource, body in consumer_objects(namespace, identity, crds):
        admin.apply(resource, body, field_manager=FIELD_MANAGER, force=True)


def binder_token(admin: Kube, namespace: str, seconds: int = TOKEN_SECONDS) -> str:
    """A bounded TokenRequest token for ``klutch-binder``; the reconciler renews it in time."""
    status = (
        client.CoreV1Api(admin.api)
        .create_namespaced_service_account_token(
            BINDER,
            namespace,
            client.AuthenticationV1TokenRequest(
                spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
            ),
        )
        .status
    )
    # The API server answers a TokenRequest with its token.
    assert status is not None
    assert status.token is not None
    return status.token


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
