"""The provider's API and Crossplane's managed-resource conventions, as pure functions."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml

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

FIELD_MANAGER = "klutch-local-provider"
FINALIZER = "finalizer.managedresource.crossplane.io"  # Crossplane's managed reconciler's
IN_USE_FINALIZER = "in-use.crossplane.io"  # on a ProviderConfig that managed resources use
EXTERNAL_NAME = "crossplane.io/external-name"
DEFAULT_PROVIDER_CONFIG = "default"
CONNECTION_SECRET_TYPE = "connection.crossplane.io/v1alpha1"  # noqa: S105 - a type name
MAX_IDENTIFIER_BYTES = 63  # PostgreSQL's NAMEDATALEN - 1; longer names are silently cut
OWNER_SUFFIX = "_owner"
CRD_DIR = Path(__file__).resolve().parents[3] / "catalog" / "provider"


class ReconcileError(Exception):
    """A failure a person fixes: its message becomes the Synced condition's message."""


def load_crds() -> list[dict[str, Any]]:
    """The provider's CRDs, sorted by file name."""
    return [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("*.yaml"))]


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
    return (meta.get("annotations") or {}).get(EXTERNAL_NAME) or meta["name"]


def for_provider(mr: dict[str, Any]) -> dict[str, Any]:
    return (mr.get("spec") or {}).get("forProvider") or {}


def at_provider(mr: dict[str, Any]) -> dict[str, Any]:
    return (mr.get("status") or {}).get("atProvider") or {}


def provider_config_name(mr: dict[str, Any]) -> str:
    ref = (mr.get("spec") or {}).get("providerConfigRef") or {}
    return ref.get("name") or DEFAULT_PROVIDER_CONFIG


def orphans(mr: dict[str, Any]) -> bool:
    """Whether deleting ``mr`` keeps the external resource (``deletionPolicy: Orphan``)."""
    return (mr.get("spec") or {}).get("deletionPolicy") == "Orphan"


def connection_secret_ref(mr: dict[str, Any]) -> tuple[str, str] | None:
    ref = (mr.get("spec") or {}).get("writeConnectionSecretToRef") or {}
    if not ref.get("name") or not ref.get("namespace"):
        return None
    return ref["namespace"], ref["name"]


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
