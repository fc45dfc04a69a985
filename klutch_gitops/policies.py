"""The Control Plane's admission policies for tenant writes, and how to install them.

The YAML files in ``catalog/policies`` are the source of truth (the chart ships a copy). A check
only in the reconciler is not enough: tenants hold binder kubeconfigs and write claims directly,
so the Control Plane refuses what no tenant may write, whoever sends it.
"""

from __future__ import annotations

from typing import Any

import yaml
from kubernetes import client

from klutch_gitops.catalog import CATALOG_DIR
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.resources import (
    VALIDATING_ADMISSION_POLICIES,
    VALIDATING_ADMISSION_POLICY_BINDINGS,
)

POLICY_DIR = CATALOG_DIR / "policies"
RESOURCES = {
    resource.kind: resource
    for resource in (VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS)
}


_FIXES = {
    403: "let this identity get, create and patch it by name (the chart's ClusterRole does)",
    404: "run a Control Plane on Kubernetes 1.30 or newer, which serves "
    "admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy",
    409: "another manager owns a field of it: settle ownership with that manager",
}


def load_policies() -> list[dict[str, Any]]:
    """Every policy and binding, policies first (a binding names its policy), sorted by file."""
    documents = [
        doc
        for path in sorted(POLICY_DIR.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    return sorted(documents, key=lambda doc: doc["kind"] != "ValidatingAdmissionPolicy")


def install_policies(
    api_client: client.ApiClient,
    policies: list[dict[str, Any]],
    field_manager: str = "klutch-gitops",
) -> None:
    """Server-side apply each object; a field another manager owns is reported, not taken."""
    kube = Kube(api_client)
    for obj in policies:
        name = f"{obj['kind']} {obj['metadata']['name']}"
        try:
            kube.apply(RESOURCES[obj["kind"]], obj, field_manager=field_manager)
        except KubeError as error:
            raise KlutchError(
                f"{name} was not applied: {error.message}",
                _FIXES.get(error.status, "check the Control Plane's admission API and retry"),
            ) from error
