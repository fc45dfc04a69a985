"""The two ClusterRoles that give a consumer's binder what Klutch's konnector needs.

``catalog/rbac/binder-roles.yaml`` is the source of truth (the chart ships a copy). The bind API
and the reconciler bind them per namespace with RoleBindings, which RBAC lets them do with the
``bind`` verb on these names alone, so neither identity needs update on Secrets itself. The chart
creates them; elsewhere (local stack, tests: admin credentials) they are created when missing.
An existing one is left as it is: Helm owns the chart's copy.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import yaml

from klutch_gitops.catalog import CATALOG_DIR
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.resources import CLUSTER_ROLES

ROLE_FILE = CATALOG_DIR / "rbac" / "binder-roles.yaml"
CONSUMER_ROLE = "klutch-binder-consumer"
CLAIMED_SECRETS_ROLE = "klutch-binder-claimed-secrets"


@cache
def _roles() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(ROLE_FILE.read_text())}


def load_cluster_role(name: str) -> dict[str, Any]:
    """The named ClusterRole from the catalog (a fresh copy each call)."""
    role: dict[str, Any] = yaml.safe_load(yaml.safe_dump(_roles()[name]))
    return role


def ensure_cluster_role(kube: Kube, name: str) -> None:
    """Create the named ClusterRole when it does not exist; an existing one is kept."""
    try:
        if kube.get(CLUSTER_ROLES, None, name) is None:
            kube.create(CLUSTER_ROLES, load_cluster_role(name))
    except KubeError as error:
        if error.conflict:  # created meanwhile by another replica
            return
        raise KlutchError(
            f"ClusterRole {name} could not be read or created: {error.message}",
            "install the chart, which ships it, or create it from "
            f"catalog/rbac/{ROLE_FILE.name} with an identity that may",
        ) from error


def role_binding(
    namespace: str, name: str, consumer: str, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A RoleBinding ``name`` in ``namespace`` of the ClusterRole ``name`` to the consumer's binder.

    The ServiceAccount is ``klutch-binder`` in ``consumer``; bound in one namespace, the
    ClusterRole grants its rules in that namespace only.
    """
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": name,
            "namespace": namespace,
            **({"labels": labels} if labels else {}),
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": "klutch-binder", "namespace": consumer}],
    }
