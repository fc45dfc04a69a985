"""Answers the APIServiceExportRequests that Klutch's ``kubectl bind`` creates itself.

After the browser flow, kubectl-bind creates its own request in the consumer namespace with the
binder kubeconfig and polls it until ``Succeeded`` or ``Failed`` (anynines/klutchio
bind/pkg/kubectl/bind-apiservice/plugin/serviceexportrequest.go); the bind API's request of the
same name exists already, so the CLI's gets a generated name ``<resource>.<group>-xxxxx``. This
controller answers every request the bind API did not write: with the same authorization as the
bind API (the template's allowed groups against the groups recorded on the consumer namespace at
bind time, since the Control Plane never sees the ID token) and the same APIServiceExport, or with
a terminal ``Failed`` phase and the reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from klutch_gitops.apis import API_SERVICE_EXPORTS, EXPORT_REQUESTS
from klutch_gitops.authz import may_bind
from klutch_gitops.consumer import FIELD_MANAGER, identity_annotation, recorded_groups
from klutch_gitops.exports import (
    FAILED,
    SUCCEEDED,
    export_object,
    list_templates,
    missing_crd,
    offered,
    request_status,
)
from klutch_gitops.kube import conditions
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.informer import Informer
from klutch_gitops.kube.resources import CRDS, NAMESPACES
from klutch_gitops.kube.workqueue import WorkQueue, run_workers

log = logging.getLogger(__name__)


def unanswered(request: Mapping[str, Any]) -> bool:
    """Neither terminal nor the bind API's own (which it answers as it writes it)."""
    if (request.get("status") or {}).get("phase") in (SUCCEEDED, FAILED):
        return False
    managers = {m.get("manager") for m in request["metadata"].get("managedFields") or []}
    return FIELD_MANAGER not in managers


def decide(
    request: Mapping[str, Any],
    namespace: Mapping[str, Any] | None,
    templates: Mapping[str, Mapping[str, Any]],
    crds: Mapping[str, Mapping[str, Any] | None],
) -> tuple[str | None, list[dict[str, Any]]]:
    """Why the request fails (None when it does not) and the exports that answer it."""
    consumer = request["metadata"]["namespace"]
    if identity_annotation(namespace) is None:
        return f"namespace {consumer} is not a consumer namespace of the bind API", []
    recorded = recorded_groups(namespace)
    if recorded is None:
        return (
            f"no OIDC groups are recorded on consumer namespace {consumer}, so no API can be "
            "authorized: bind once more through the browser flow (kubectl bind URL)",
            [],
        )
    groups, default = recorded
    problems, exports = [], []
    for resource in (request.get("spec") or {}).get("resources") or []:
        api = f"{resource.get('resource', '')}.{resource.get('group', '')}"
        template = templates.get(api)
        if template is None:
            problems.append(
                f"{api}: no APIServiceExportTemplate offers it; offered: "
                f"{', '.join(sorted(templates)) or 'none'}"
            )
            continue
        decision = may_bind(template, api, groups, default)
        if not decision.allowed:
            problems.append(decision.reason)
            continue
        crd = crds.get(api)
        if (problem := missing_crd(template, crd)) is not None or crd is None:
            problems.append(problem or f"{api}: no CustomResourceDefinition")
            continue
        exports.append(export_object(consumer, template, crd))
    if not exports and not problems:
        problems.append("the request names no resource")
    return ("; ".join(problems) or None), ([] if problems else exports)


class ExportRequestController:
    """Runs on the leader beside the namespace controller (admin credentials)."""

    def __init__(self, kube: Kube, workers: int = 1) -> None:
        self.kube = kube
        self.workers = workers
        self.queue: WorkQueue[tuple[str, str]] = WorkQueue()
        self.requests = Informer(
            kube, EXPORT_REQUESTS, self._on_request, name="apiserviceexportrequests"
        )

    def start(self) -> ExportRequestController:
        self.requests.start()
        run_workers(self.queue, self.reconcile, self.workers, "apiserviceexportrequest")
        return self

    def stop(self) -> None:
        self.requests.stop()
        self.queue.shutdown()

    def _on_request(self, event: str, obj: dict[str, Any]) -> None:
        if event != "DELETED" and unanswered(obj):
            self.queue.add((obj["metadata"]["namespace"], obj["metadata"]["name"]))

    def reconcile(self, key: tuple[str, str]) -> None:
        consumer, name = key
        request = self.kube.get(EXPORT_REQUESTS, consumer, name)
        if request is None or not unanswered(request):
            return
        templates = offered(list_templates(self.kube))
        apis = [
            f"{r.get('resource', '')}.{r.get('group', '')}"
            for r in (request.get("spec") or {}).get("resources") or []
        ]
        crds = {api: self.kube.get(CRDS, None, api) for api in apis if api in templates}
        problem, exports = decide(
            request, self.kube.get(NAMESPACES, None, consumer), templates, crds
        )
        for export in exports:
            self.kube.apply(API_SERVICE_EXPORTS, export, field_manager=FIELD_MANAGER, force=True)
        self.kube.apply(
            EXPORT_REQUESTS,
            request_status(name, consumer, problem, conditions.now(), reason="Refused"),
            field_manager=FIELD_MANAGER,
            force=True,
            subresource="status",
        )
        log.info(
            "answered export request",
            extra={
                "consumer": consumer,
                "request": name,
                "phase": FAILED if problem else SUCCEEDED,
            },
        )
