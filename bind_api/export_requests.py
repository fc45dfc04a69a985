"""APIServiceExportRequests: one per bound API, answered with an APIServiceExport.

The export is a snapshot of the Control Plane CRD the template selects; without that CRD the
request fails with a message saying what is missing, and a stale export is removed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from klutch_gitops.apis import API_SERVICE_EXPORTS, EXPORT_REQUESTS
from klutch_gitops.consumer import FIELD_MANAGER
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import (
    FAILED,
    SUCCEEDED,
    export_object,
    missing_crd,
    request_status,
    template_api,
)
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.resources import CRDS


def export_request(namespace: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """An APIServiceExportRequest named ``<resource>.<group>``, as the template describes it."""
    spec = template.get("spec") or {}
    selector = spec["APIServiceSelector"]
    return {
        "apiVersion": EXPORT_REQUESTS.api_version,
        "kind": "APIServiceExportRequest",
        "metadata": {"name": template_api(template), "namespace": namespace},
        "spec": {
            "resources": [
                {
                    "group": selector["group"],
                    "resource": selector["resource"],
                    "versions": [selector["version"]] if selector.get("version") else [],
                    "permissionClaims": list(spec.get("permissionClaims") or []),
                }
            ]
        },
    }


def apply_export(admin: Kube, namespace: str, template: dict[str, Any]) -> str:
    """Apply the request, answer it with an export (or without one), and return its phase."""
    body = export_request(namespace, template)
    name = body["metadata"]["name"]
    live = admin.get(EXPORT_REQUESTS, namespace, name)
    if live is not None and _resources(live) != _resources(body):
        admin.delete(EXPORT_REQUESTS, namespace, name)  # spec.resources is immutable
        _wait_gone(admin, EXPORT_REQUESTS, namespace, name, 30)
        live = None
    live = admin.apply(EXPORT_REQUESTS, body, field_manager=FIELD_MANAGER, force=True)
    crd = admin.get(CRDS, None, name)
    problem = missing_crd(template, crd)
    if problem is None and crd is not None:
        admin.apply(
            API_SERVICE_EXPORTS,
            export_object(namespace, template, crd),
            field_manager=FIELD_MANAGER,
            force=True,
        )
    else:
        admin.delete(API_SERVICE_EXPORTS, namespace, name)  # a stale export would still serve
    status = live.get("status") or {}
    if status.get("phase") != (FAILED if problem else SUCCEEDED) or (
        status.get("terminalMessage") != problem
    ):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        admin.apply(
            EXPORT_REQUESTS,
            request_status(name, namespace, problem, now),
            field_manager=FIELD_MANAGER,
            force=True,
            subresource="status",
        )
    return FAILED if problem else SUCCEEDED


def _resources(request: Mapping[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """What identifies a request's APIs (claims get server defaults, so they are left out)."""
    return [
        (r.get("group", ""), r["resource"], tuple(r.get("versions") or ()))
        for r in (request.get("spec") or {}).get("resources") or []
    ]


def _wait_gone(admin: Kube, resource: Resource, namespace: str, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while admin.get(resource, namespace, name) is not None:
        if time.monotonic() > deadline:
            raise KlutchError(
                f"{resource.kind} {namespace}/{name} was not deleted in {timeout:.0f}s",
                f"check its finalizers: kubectl get {resource.plural} -n {namespace} {name}",
            )
        time.sleep(0.2)
