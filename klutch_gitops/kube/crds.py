"""The CustomResourceDefinitions of the bind kinds and of our own kinds, and how to install them.

The YAML files in ``catalog/crds`` are the source of truth; this module only picks the ones a
cluster needs and applies them with our field manager, so repeated installs are no-ops.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ConflictError, NotFoundError

from klutch_gitops.catalog import CATALOG_DIR
from klutch_gitops.errors import KlutchError

CRD_DIR = CATALOG_DIR / "crds"
DEV_CLAIM_CRDS = CRD_DIR.parent / "dev" / "claim-crds.yaml"

# The App Cluster only holds the bindings; everything else lives on the Control Plane.
APP_CLUSTER_KINDS = frozenset({"APIServiceBinding"})
CLUSTERS = ("app", "control-plane")


def load_crds(*, cluster: str) -> list[dict[str, Any]]:
    """The CRDs that belong on ``cluster`` (``app`` or ``control-plane``), sorted by name."""
    if cluster not in CLUSTERS:
        raise KlutchError(f"unknown cluster {cluster!r}", f"use one of: {', '.join(CLUSTERS)}")
    crds = [yaml.safe_load(path.read_text()) for path in sorted(CRD_DIR.glob("*.yaml"))]
    on_app = cluster == "app"
    return [crd for crd in crds if (crd["spec"]["names"]["kind"] in APP_CLUSTER_KINDS) == on_app]


SNAPSHOT_FIELDS = (
    "name",
    "served",
    "storage",
    "schema",
    "subresources",
    "additionalPrinterColumns",
)


def version_snapshot(version: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a CRD version an APIServiceExport carries (and an App CRD is made from)."""
    return {k: version[k] for k in SNAPSHOT_FIELDS if k in version}


def load_dev_claim_crds() -> list[dict[str, Any]]:
    """Stand-in claim CRDs for a Control Plane without Crossplane (the local stack, tests)."""
    return [doc for doc in yaml.safe_load_all(DEV_CLAIM_CRDS.read_text()) if doc]


def install_crds(
    api_client: client.ApiClient,
    crds: list[dict[str, Any]],
    field_manager: str = "klutch-gitops",
    timeout: float = 60,
) -> None:
    """Server-side apply each CRD and wait until all are Established, so callers can use them.

    Conflicts are not forced: a field another manager owns is reported, not taken over. A CRD
    whose scope changed (the apiserver keeps ``spec.scope`` immutable) is refused before any
    apply, with the migration as the fix.
    """
    resource = DynamicClient(api_client).resources.get(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition"
    )
    for crd in crds:
        if error := scope_change(_live(resource, crd["metadata"]["name"]), crd):
            raise error
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            resource.server_side_apply(body=crd, field_manager=field_manager, force_conflicts=False)
        except ConflictError as error:
            raise KlutchError(
                f"CRD {name} was not applied: {error.summary()}",
                "settle ownership with that manager (or remove its fields), then install again",
            ) from error
    deadline = time.monotonic() + timeout
    pending = [crd["metadata"]["name"] for crd in crds]
    while pending := [name for name in pending if not _established(resource.get(name=name))]:
        if time.monotonic() > deadline:
            raise KlutchError(
                f"CRDs not Established after {timeout:.0f}s: {', '.join(pending)}",
                "check their NamesAccepted condition: "
                "`kubectl get crd <name> -o jsonpath='{.status.conditions}'`",
            )
        time.sleep(0.2)


def scope_change(live: Mapping[str, Any] | None, crd: Mapping[str, Any]) -> KlutchError | None:
    """The error for an installed CRD whose scope differs from the file's, else None.

    The scope cannot be updated, so the old CRD must go, and with it every object of its kind:
    for APIServiceBinding (namespaced before it became cluster-scoped like Klutch's) binding
    again writes them anew.
    """
    if live is None:
        return None
    name, kind = crd["metadata"]["name"], crd["spec"]["names"]["kind"]
    old, new = live["spec"]["scope"], crd["spec"]["scope"]
    if old == new:
        return None
    again = (
        "re-run 'klutch-bind bind' (idempotent) for each consumer to write them again"
        if kind == "APIServiceBinding"
        else f"recreate the {kind} objects"
    )
    return KlutchError(
        f"CRD {name} is installed with spec.scope {old}, this version needs {new}; "
        "the scope of a CRD cannot be changed in place",
        f"run 'kubectl delete crd {name}' (this deletes every {kind}), install again, then {again}",
    )


def _live(resource: Any, name: str) -> dict[str, Any] | None:
    try:
        live: dict[str, Any] = resource.get(name=name).to_dict()
        return live
    except NotFoundError:
        return None


def _established(crd: Any) -> bool:
    conditions = (crd.to_dict().get("status") or {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)
