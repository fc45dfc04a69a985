"""The provider's API and Crossplane's managed-resource conventions, as pure functions.

Two flavours of the same kinds: the cluster-scoped group Crossplane 1.x composes (and Klutch's
claims need), and Crossplane 2's namespaced managed resources in the ``.m.`` group, with a
namespaced ProviderConfig and a ClusterProviderConfig (crossplane/crossplane apis/v2
core/v2/resource_namespace.go: ``providerConfigRef {kind, name}``, ``writeConnectionSecretToRef
{name}`` in the resource's namespace, ``managementPolicies`` instead of ``deletionPolicy``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.catalog import CATALOG_DIR
from klutch_gitops.kube import conditions
from klutch_gitops.kube.client import Resource

GROUP = "postgresql.local.klutch.anynines.com"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PROVIDER_CONFIGS = Resource(GROUP, VERSION, "providerconfigs", "ProviderConfig", namespaced=False)
DATABASES = Resource(GROUP, VERSION, "localdatabases", "LocalDatabase", namespaced=False)
USERS = Resource(GROUP, VERSION, "localusers", "LocalUser", namespaced=False)
BACKUPS = Resource(GROUP, VERSION, "localbackups", "LocalBackup", namespaced=False)
RESTORES = Resource(GROUP, VERSION, "localrestores", "LocalRestore", namespaced=False)

M_GROUP = "postgresql.m.local.klutch.anynines.com"  # Crossplane 2's namespaced managed resources
NS_PROVIDER_CONFIGS = Resource(M_GROUP, VERSION, "providerconfigs", "ProviderConfig")
CLUSTER_PROVIDER_CONFIGS = Resource(
    M_GROUP, VERSION, "clusterproviderconfigs", "ClusterProviderConfig", namespaced=False
)
CLUSTER_PROVIDER_CONFIG = "ClusterProviderConfig"

FIELD_MANAGER = "klutch-local-provider"
FINALIZER = "finalizer.managedresource.crossplane.io"  # Crossplane's managed reconciler's
IN_USE_FINALIZER = "in-use.crossplane.io"  # on a ProviderConfig that managed resources use
EXTERNAL_NAME = "crossplane.io/external-name"
DEFAULT_PROVIDER_CONFIG = "default"
CONNECTION_SECRET_TYPE = "connection.crossplane.io/v1alpha1"  # noqa: S105 - a type name
MAX_IDENTIFIER_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1; longer names are silently cut
OWNER_SUFFIX = "_owner"
CRD_DIR = CATALOG_DIR / "provider"
NAMESPACED_CRD_DIR = CRD_DIR / "namespaced"


class ReconcileError(Exception):
    """A failure a person fixes: its message becomes the Synced condition's message."""


def load_crds(directory: Path = CRD_DIR) -> list[dict[str, Any]]:
    """The CRDs in ``directory`` (the cluster-scoped ones by default), sorted by file name."""
    return [yaml.safe_load(path.read_text()) for path in sorted(directory.glob("*.yaml"))]


def namespaced(resource: Resource) -> Resource:
    """The namespaced twin of a cluster-scoped managed kind: same kind, plural and version, in
    the ``.m.`` group, as Crossplane 2 providers name theirs."""
    return dataclasses.replace(resource, group=M_GROUP, namespaced=True)


def in_flavour_of(resource: Resource, mr: dict[str, Any]) -> Resource:
    """``resource`` (a cluster-scoped kind) in ``mr``'s flavour: a namespaced resource refers
    only to namespaced ones, in its own namespace."""
    return namespaced(resource) if mr["metadata"].get("namespace") else resource


def identity(mr: dict[str, Any]) -> str:
    """``namespace/name`` of a namespaced resource, ``name`` of a cluster-scoped one: what the
    marker on the server names, so two namespaces never adopt each other's database or role."""
    meta = mr["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"]


def now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def timestamp(seconds: float) -> str:
    return dt.datetime.fromtimestamp(int(seconds), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- conditions: Crossplane's types and reasons --------------------------------------------------


def condition(kind: str, status: bool, reason: str, message: str = "") -> dict[str, Any]:
    cond: dict[str, Any] = {"type": kind, "status": "True" if status else "False", "reason": reason}
    if message:
        cond["message"] = message
    return cond


def available() -> dict[str, Any]:
    return condition("Ready", True, "Available")


def creating() -> dict[str, Any]:
    return condition("Ready", False, "Creating")


def deleting() -> dict[str, Any]:
    return condition("Ready", False, "Deleting")


def reconcile_success() -> dict[str, Any]:
    return condition("Synced", True, "ReconcileSuccess")


def reconcile_error(message: str) -> dict[str, Any]:
    return condition("Synced", False, "ReconcileError", message[:4000])


def set_conditions(
    old: list[dict[str, Any]], new: list[dict[str, Any]], generation: int, at: str
) -> list[dict[str, Any]]:
    """``old`` with ``new`` set; a condition that did not change keeps its lastTransitionTime
    (what crossplane-runtime does: any change moves it), so an unchanged status is byte-for-byte
    the same."""
    return conditions.set_conditions(old, new, generation, at, conditions.CROSSPLANE)


def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return conditions.by_type(obj.get("status"))


# -- managed-resource fields ---------------------------------------------------------------------


def external_name(mr: dict[str, Any]) -> str:
    """The annotation, defaulting to the object's name as Crossplane's does for named resources."""
    meta = mr["metadata"]
    name: str = (meta.get("annotations") or {}).get(EXTERNAL_NAME) or meta["name"]
    return name


def for_provider(mr: dict[str, Any]) -> dict[str, Any]:
    return (mr.get("spec") or {}).get("forProvider") or {}


def at_provider(mr: dict[str, Any]) -> dict[str, Any]:
    return (mr.get("status") or {}).get("atProvider") or {}


def provider_config_name(mr: dict[str, Any]) -> str:
    ref = (mr.get("spec") or {}).get("providerConfigRef") or {}
    return ref.get("name") or DEFAULT_PROVIDER_CONFIG


@dataclasses.dataclass(frozen=True)
class ProviderConfigRef:
    """The object ``spec.providerConfigRef`` names, wherever it lives."""

    resource: Resource
    namespace: str | None
    name: str

    def __str__(self) -> str:
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.resource.kind} {where}{self.name}"


def provider_config_ref(mr: dict[str, Any]) -> ProviderConfigRef:
    """A cluster-scoped resource names a cluster ProviderConfig; a namespaced one a
    ClusterProviderConfig (the default kind) or a ProviderConfig in its own namespace."""
    name = provider_config_name(mr)
    namespace = mr["metadata"].get("namespace")
    if not namespace:
        return ProviderConfigRef(PROVIDER_CONFIGS, None, name)
    kind = ((mr.get("spec") or {}).get("providerConfigRef") or {}).get("kind")
    if (kind or CLUSTER_PROVIDER_CONFIG) == CLUSTER_PROVIDER_CONFIG:
        return ProviderConfigRef(CLUSTER_PROVIDER_CONFIGS, None, name)
    return ProviderConfigRef(NS_PROVIDER_CONFIGS, namespace, name)


def allows(mr: dict[str, Any], action: str) -> bool:
    """Whether ``spec.managementPolicies`` (absent: ``["*"]``) lets the provider ``action``
    (Create, Update, Delete) the external resource."""
    policies = (mr.get("spec") or {}).get("managementPolicies") or ["*"]
    return "*" in policies or action in policies


def orphans(mr: dict[str, Any]) -> bool:
    """Whether deleting ``mr`` keeps the external resource: ``deletionPolicy: Orphan`` (cluster
    flavour) or management policies without Delete (namespaced flavour)."""
    return (mr.get("spec") or {}).get("deletionPolicy") == "Orphan" or not allows(mr, "Delete")


def connection_secret_ref(mr: dict[str, Any]) -> tuple[str, str] | None:
    """The Secret's namespace and name: a namespaced resource writes into its own namespace."""
    ref = (mr.get("spec") or {}).get("writeConnectionSecretToRef") or {}
    namespace = mr["metadata"].get("namespace") or ref.get("namespace")
    if not ref.get("name") or not namespace:
        return None
    return namespace, ref["name"]


def controller_reference(mr: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": mr["apiVersion"],
        "kind": mr["kind"],
        "name": mr["metadata"]["name"],
        "uid": mr["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def controlled_by(obj: dict[str, Any], mr: dict[str, Any]) -> bool:
    return any(
        ref.get("controller") and ref.get("uid") == mr["metadata"]["uid"]
        for ref in obj["metadata"].get("ownerReferences") or []
    )


def pg_identifier(name: str, what: str, spare: int = 0) -> str:
    """``name`` if PostgreSQL can hold it as it is (with ``spare`` bytes left for a suffix); an
    error naming the fix otherwise."""
    size, limit = len(name.encode()), MAX_IDENTIFIER_BYTES - spare
    if not name or "\0" in name or size > limit:
        raise ReconcileError(
            f"{what} {name!r} is not a usable PostgreSQL name ({size} bytes; 1 to {limit} "
            f"without NUL): set a shorter one in the {EXTERNAL_NAME} annotation"
        )
    return name


def owner_role(database: str) -> str:
    """The NOLOGIN role that owns ``database`` and that its Owner users act as."""
    return f"{database}{OWNER_SUFFIX}"


def marker(kind: str, name: str) -> str:
    """The comment on a role this provider made: what it belongs to, so a role (or a database,
    through its owner role) that someone else made is never adopted, altered or dropped."""
    return f"managed by klutch-gitops local-provider: {kind}/{name}"
