"""What function-klutch-local composes: pure functions from the observed composite resource and
the step's input to the desired composed resources.

They compose what the local backend's Resources-mode Compositions composed with patches, value
for value: the database is named ``<claim namespace>-<claim name>`` (the external-name), the plan
sets the connection limit unless ``parameters.maxConnections`` does, bindings, backups and
restores find the database by the claim's ``instanceRef``. A field those patches required (policy
``Required``) and the composite lacks is a ``CompositionError`` naming it, which the server
returns as a fatal result, as a failed Required patch stopped the Resources-mode composition.

A composer is picked by the step input's ``compose`` field (``registry.py``, which also serves
the namespaced flavour's composers).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

Composer = Callable[[dict[str, Any], dict[str, Any]], dict[str, dict[str, Any]]]

API_VERSION = "postgresql.local.klutch.anynines.com/v1alpha1"
PROVIDER_CONFIG = "local-postgresql"
EXTERNAL_NAME = "crossplane.io/external-name"
CLAIM_NAMESPACE = "crossplane.io/claim-namespace"
CLAIM_NAME = "crossplane.io/claim-name"
# The plan's size is its last word (postgresql-single-small): the connection limit it gives.
PLAN_CONNECTIONS = {"nano": 10, "small": 25, "medium": 50, "big": 100}
DEFAULT_CONNECTIONS = 10
# spec.parameters fields copied to the database as they are.
DATABASE_PARAMETERS = (
    "statementTimeout",
    "tempFileLimit",
    "idleInTransactionSessionTimeout",
    "workMem",
)


class CompositionError(ValueError):
    """The composite lacks what the composition needs: the message names the field."""


def describe(xr: dict[str, Any]) -> str:
    """``Kind namespace/name`` of a namespaced composite, ``Kind name`` of a cluster one."""
    meta = xr.get("metadata") or {}
    namespace = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{xr.get('kind', 'composite')} {namespace}{meta.get('name', '?')}"


def _label(xr: dict[str, Any], key: str) -> str:
    value = ((xr.get("metadata") or {}).get("labels") or {}).get(key)
    if not value:
        raise CompositionError(
            f"{describe(xr)}: metadata.labels[{key}] is missing; "
            "the local backend composes claims only (create a claim, not the composite)"
        )
    return str(value)


def _spec(xr: dict[str, Any], field: str) -> Any:
    value = (xr.get("spec") or {}).get(field)
    if value in (None, ""):
        raise CompositionError(f"{describe(xr)}: spec.{field} is missing")
    return value


def _claim_scoped(xr: dict[str, Any], name: str) -> str:
    """``<claim namespace>-<name>``: how the local backend names a claim's database objects."""
    return f"{_label(xr, CLAIM_NAMESPACE)}-{name}"


def local_resource(
    kind: str, for_provider: dict[str, Any], external_name: str | None = None
) -> dict[str, Any]:
    """A managed resource of the local provider with the compositions' common fields."""
    manifest: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "spec": {
            "forProvider": for_provider,
            "providerConfigRef": {"name": PROVIDER_CONFIG},
            "deletionPolicy": "Delete",
        },
    }
    if external_name is not None:
        manifest["metadata"] = {"annotations": {EXTERNAL_NAME: external_name}}
    return manifest


def connection_limit(xr: dict[str, Any]) -> int:
    """``parameters.maxConnections`` if set, else the plan size's limit."""
    parameters = (xr.get("spec") or {}).get("parameters") or {}
    if parameters.get("maxConnections") is not None:
        return int(parameters["maxConnections"])
    plan = (xr.get("spec") or {}).get("plan")
    if plan is None:
        return DEFAULT_CONNECTIONS
    size = re.search(r"[a-z]+$", str(plan))
    if size is None or size.group(0) not in PLAN_CONNECTIONS:
        raise CompositionError(
            f"{describe(xr)}: spec.plan {plan!r} does not end in "
            f"a size the local backend knows ({', '.join(PLAN_CONNECTIONS)})"
        )
    return PLAN_CONNECTIONS[size.group(0)]


def postgresql(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A PostgresqlInstance: one LocalDatabase named after the claim."""
    parameters = (xr.get("spec") or {}).get("parameters") or {}
    for_provider: dict[str, Any] = {"connectionLimit": connection_limit(xr)}
    for field in DATABASE_PARAMETERS:
        if parameters.get(field) is not None:
            for_provider[field] = parameters[field]
    name = _claim_scoped(xr, _label(xr, CLAIM_NAME))
    return {"database": local_resource("LocalDatabase", for_provider, name)}


def servicebinding(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A ServiceBinding: a LocalUser owning the instance's database, whose credentials the
    provider writes into ``<claim name>-creds`` in the claim's namespace."""
    namespace, claim = _label(xr, CLAIM_NAMESPACE), _label(xr, CLAIM_NAME)
    for_provider = {
        "privileges": ["Owner"],
        "database": _claim_scoped(xr, str(_spec(xr, "instanceRef"))),
    }
    user = local_resource("LocalUser", for_provider, f"{namespace}-{claim}")
    del user["spec"]["deletionPolicy"]  # the Resources-mode composition left the default
    user["spec"]["writeConnectionSecretToRef"] = {"namespace": namespace, "name": f"{claim}-creds"}
    return {"user": user}


def backup(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A Backup: a LocalBackup (pg_dump) of the instance's database."""
    for_provider = {"database": _claim_scoped(xr, str(_spec(xr, "instanceRef")))}
    name = _claim_scoped(xr, _label(xr, CLAIM_NAME))
    return {"backup": local_resource("LocalBackup", for_provider, name)}


def restore(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A Restore: a LocalRestore of the Backup's dump into the instance's database (the
    Resources-mode composition set no external-name: the provider names it)."""
    for_provider = {
        "backup": _claim_scoped(xr, str(_spec(xr, "backupRef"))),
        "database": _claim_scoped(xr, str(_spec(xr, "instanceRef"))),
    }
    return {"restore": local_resource("LocalRestore", for_provider)}


def _get_path(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return None
        obj = obj[key]
    return obj


def _set_path(obj: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for key in parents:
        obj = obj.setdefault(key, {})
    obj[last] = value


def template(xr: dict[str, Any], step_input: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Any one resource: ``input.resource`` (name and base manifest) with ``input.fields``
    (composed field path: composite field path, dot-separated) copied from the composite; a
    field the composite lacks keeps the base's value, as an optional patch did."""
    resource = step_input.get("resource") or {}
    if not resource.get("name") or not isinstance(resource.get("base"), dict):
        raise CompositionError(
            "input.resource needs a name and a base manifest (compose: template)"
        )
    manifest = copy.deepcopy(resource["base"])
    for to_path, from_path in (step_input.get("fields") or {}).items():
        value = _get_path(xr, from_path)
        if value is not None:
            _set_path(manifest, to_path, value)
    return {resource["name"]: manifest}


COMPOSERS: dict[str, Composer] = {
    "postgresql": postgresql,
    "servicebinding": servicebinding,
    "backup": backup,
    "restore": restore,
    "template": template,
}


def is_ready(observed: dict[str, Any] | None, step_input: dict[str, Any]) -> bool:
    """A composed resource is ready once it exists and its Ready condition is True (the
    compositions' MatchCondition readiness check), or once it exists when the input says
    ``readinessCheck: None`` (a kind without conditions, as readinessChecks type None did)."""
    check = step_input.get("readinessCheck", "MatchCondition")
    if check not in ("MatchCondition", "None"):
        raise CompositionError(
            f"input.readinessCheck {check!r} is not one function-klutch-local knows: "
            "use MatchCondition (the default: Ready is True) or None"
        )
    if observed is None:
        return False
    if check == "None":
        return True
    conditions = (observed.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def connection_details(
    step_input: dict[str, Any], observed: dict[str, dict[str, bytes]]
) -> dict[str, bytes]:
    """The composite's connection details: ``input.connectionDetails`` names a composed resource
    (``resource``) and the keys of its connection secret to pass on (``keys``), and fixed
    ``values`` (as a FromValue connection detail did)."""
    wanted = step_input.get("connectionDetails") or {}
    details = observed.get(str(wanted.get("resource")), {})
    passed = {key: details[key] for key in wanted.get("keys") or () if key in details}
    fixed = {key: str(value).encode() for key, value in (wanted.get("values") or {}).items()}
    return {**passed, **fixed}
