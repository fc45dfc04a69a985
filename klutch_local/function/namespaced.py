"""The namespaced-XR flavour of the local backend: what function-klutch-local composes for
Crossplane 2's namespaced composite resources (``catalog/xrds-namespaced/``).

A Crossplane 2 user writes a namespaced XR (no claim) and gets namespaced managed resources of
the local provider (group ``postgresql.m.local.klutch.anynines.com``) in the XR's namespace:
Crossplane places every composed resource of a namespaced XR there and names it after the XR
(crossplane/crossplane internal/controller/apiextensions/composite/composition_render.go,
RenderComposedResourceMetadata), so these composers set neither. The names on the server are
``<namespace>-<name>``: one PostgreSQL server holds every namespace's databases and roles.
Connection Secrets are written by the LocalUser into the XR's namespace (a namespaced managed
resource's ``writeConnectionSecretToRef`` has a name only); Crossplane 2's XRs have none.

Backups and restores compose a LocalBackup and a LocalRestore the same way. Pure functions;
``COMPOSERS`` is merged into function-klutch-local's registry
(``klutch_local.function.composers``) under the names the Compositions' input ``compose``
field uses.
"""

from __future__ import annotations

from typing import Any

from klutch_local.function.composers import (
    DATABASE_PARAMETERS,
    Composer,
    CompositionError,
    connection_limit,
    describe,
)

API_VERSION = "postgresql.m.local.klutch.anynines.com/v1alpha1"
PROVIDER_CONFIG = {"kind": "ClusterProviderConfig", "name": "local-postgresql"}
EXTERNAL_NAME = "crossplane.io/external-name"


def _ref(xr: dict[str, Any], field: str, kind: str) -> str:
    value = (xr.get("spec") or {}).get(field)
    if not value:
        raise CompositionError(
            f"{describe(xr)}: spec.{field} is missing (the {kind} to use, in this namespace)"
        )
    return str(value)


def server_name(xr: dict[str, Any], name: str) -> str:
    """``<XR namespace>-<name>``: a database or role name no other namespace composes."""
    namespace = (xr.get("metadata") or {}).get("namespace")
    if not namespace:
        raise CompositionError(
            f"{describe(xr)} has no namespace: the namespaced flavour composes namespaced XRs "
            "(apiextensions.crossplane.io/v2, scope Namespaced); cluster-scoped claims use "
            "the local-* Compositions"
        )
    return f"{namespace}-{name}"


def managed(kind: str, external_name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A namespaced managed resource of the local provider, on the stack's server."""
    return {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"annotations": {EXTERNAL_NAME: external_name}},
        "spec": {"providerConfigRef": dict(PROVIDER_CONFIG), **spec},
    }


def postgresql(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A PostgresqlInstance: one LocalDatabase, ``<namespace>-<name>`` on the server."""
    parameters = (xr.get("spec") or {}).get("parameters") or {}
    for_provider: dict[str, Any] = {"connectionLimit": connection_limit(xr)}
    for field in DATABASE_PARAMETERS:
        if parameters.get(field) is not None:
            for_provider[field] = parameters[field]
    name = server_name(xr, xr["metadata"]["name"])
    return {"database": managed("LocalDatabase", name, {"forProvider": for_provider})}


def binding(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A ServiceBinding: a LocalUser with the Owner privileges on the instance's database,
    writing a9s's credential keys into the Secret ``spec.secretName`` (default
    ``<binding>-creds``) of the XR's namespace."""
    spec = xr.get("spec") or {}
    instance = _ref(xr, "instanceRef", "PostgresqlInstance")
    name = xr["metadata"]["name"]
    user = managed(
        "LocalUser",
        server_name(xr, name),
        {
            "forProvider": {
                "database": server_name(xr, instance),
                "privileges": ["Owner"],
            },
            "writeConnectionSecretToRef": {"name": spec.get("secretName") or f"{name}-creds"},
        },
    )
    return {"user": user}


def backup(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A Backup: a LocalBackup (``pg_dump``) of the instance's database, its dump named after
    the XR (the provider keeps a namespace's dumps apart)."""
    database = server_name(xr, _ref(xr, "instanceRef", "PostgresqlInstance"))
    spec = {"forProvider": {"database": database}}
    return {"backup": managed("LocalBackup", xr["metadata"]["name"], spec)}


def restore(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A Restore: a LocalRestore of a Backup's dump into an instance's database, both of this
    namespace."""
    for_provider = {
        "backup": _ref(xr, "backupRef", "Backup"),
        "database": server_name(xr, _ref(xr, "instanceRef", "PostgresqlInstance")),
    }
    name = server_name(xr, xr["metadata"]["name"])
    return {"restore": managed("LocalRestore", name, {"forProvider": for_provider})}


COMPOSERS: dict[str, Composer] = {
    "namespaced-postgresql": postgresql,
    "namespaced-servicebinding": binding,
    "namespaced-backup": backup,
    "namespaced-restore": restore,
}
