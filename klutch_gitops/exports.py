"""APIServiceExportTemplates and APIServiceExports: how an export request is answered.

The bind API answers the requests it writes itself; the export request controller the leading
reconciler runs answers the ones Klutch's kubectl-bind creates with the binder kubeconfig. Both
build the same APIServiceExport and request status from these.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from klutch_gitops.apis import API_SERVICE_EXPORTS, EXPORT_REQUESTS, TEMPLATES
from klutch_gitops.consumer import export_from_crd
from klutch_gitops.kube import conditions
from klutch_gitops.kube.client import Kube, KubeError

SOURCE_HASH_ANNOTATION = "klutch.anynines.com/source-spec-hash"
SUCCEEDED, FAILED = "Succeeded", "Failed"


def template_api(template: Mapping[str, Any]) -> str:
    """``<resource>.<group>`` of the API a template offers."""
    selector = (template.get("spec") or {}).get("APIServiceSelector") or {}
    return f"{selector.get('resource', '')}.{selector.get('group', '')}"


def offered(templates: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The template of every API offered; the first by namespace and name wins, so the pick is
    stable."""
    by_api: dict[str, dict[str, Any]] = {}
    for template in sorted(
        templates, key=lambda t: (t["metadata"].get("namespace", ""), t["metadata"]["name"])
    ):
        by_api.setdefault(template_api(template), template)
    return by_api


def list_templates(admin: Kube, namespace: str | None = None) -> list[dict[str, Any]]:
    """Templates of both groups, in ``namespace`` or everywhere."""
    templates: list[dict[str, Any]] = []
    for resource in TEMPLATES:
        try:
            templates += admin.list(resource, namespace)[0]
        except KubeError as error:
            if not error.not_found:  # a group whose CRD is not installed offers nothing
                raise
    return templates


def missing_crd(template: Mapping[str, Any], crd: Mapping[str, Any] | None) -> str | None:
    """Why the template's API cannot be exported, or None when it can."""
    api = template_api(template)
    if crd is None:
        return f"CustomResourceDefinition {api} does not exist on the Control Plane"
    version = template["spec"]["APIServiceSelector"].get("version")
    served = [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
    if version and version not in served:
        return f"CustomResourceDefinition {api} does not serve {version} (served: {served})"
    return None


def export_object(
    namespace: str, template: Mapping[str, Any], crd: Mapping[str, Any]
) -> dict[str, Any]:
    """The APIServiceExport: the CRD snapshot with the template's permission claims."""
    spec = export_from_crd(crd, (template.get("spec") or {}).get("permissionClaims") or [])
    digest = hashlib.sha256(json.dumps(crd["spec"], sort_keys=True).encode()).hexdigest()
    return {
        "apiVersion": API_SERVICE_EXPORTS.api_version,
        "kind": "APIServiceExport",
        "metadata": {
            "name": crd["metadata"]["name"],
            "namespace": namespace,
            "annotations": {SOURCE_HASH_ANNOTATION: digest},
        },
        "spec": spec,
    }


def request_status(
    name: str, namespace: str, problem: str | None, now: str, reason: str = "CRDMissing"
) -> dict[str, Any]:
    """Status of an export request: Succeeded, or Failed with a terminal message and ``reason``."""
    ready = conditions.condition(
        "Ready",
        not problem,
        reason if problem else "Exported",
        problem or f"APIServiceExport {name} exists",
    )
    status: dict[str, Any] = {
        "phase": FAILED if problem else SUCCEEDED,
        "conditions": conditions.set_conditions(
            [], [{**ready, "type": "ExportsReady"}, ready], None, now
        ),
    }
    if problem:
        status["terminalMessage"] = problem
    return {
        "apiVersion": EXPORT_REQUESTS.api_version,
        "kind": "APIServiceExportRequest",
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    }
