"""Security tier, binder kubeconfigs that may now create export requests (kubectl-bind's own).

Two tenants bound with real RBAC on the real Control Plane, the reconciler's export request
controller running. With A's binder kubeconfig, an attacker tries to reach B (B's requests,
exports, Secrets and namespace), to read A's own Secrets (the App kubeconfig and Git credentials
of a RepositoryBinding live there), to rewrite the groups recorded on A's namespace, and to get an
export of an API A's groups do not allow by creating the request itself. Each attempt is a 403, or
a request answered ``Failed`` with nothing exported.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from bind_api.bindings import (
    BINDER_SECRET,
    EXPORT_REQUESTS,
    FAILED,
    BindingRequest,
    bind,
    unbind,
)
from bind_api.consumer import BIND_GROUPS_ANNOTATION
from bind_api.export_requests import ExportRequestController
from bind_api.namespaces import API_SERVICE_EXPORTS
from klutch_gitops.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube import NAMESPACES, SECRETS, Kube, KubeError, api_client
from tests.integration.bindapi import offer, withdraw

POSTGRES = "postgresqlinstances.anynines.com"
BINDINGS = "servicebindings.anynines.com"


@pytest.fixture
def admin(clusters: dict[str, client.ApiClient]) -> Iterator[Kube]:
    """Templates (PostgreSQL for team-a, ServiceBindings for dbas) and the controller."""
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    admin = Kube(clusters["control-plane"])
    namespace = offer(admin, "a-sec", {"postgresqlinstances": "team-a", "servicebindings": "dbas"})
    controller = ExportRequestController(admin).start()
    yield admin
    controller.stop()
    withdraw(admin, namespace)


def forbidden(call: Callable[[], Any]) -> bool:
    try:
        call()
    except KubeError as error:
        return error.status == 403
    return False


def export_request(namespace: str, api: str) -> dict[str, Any]:
    resource, group = api.split(".", 1)
    return {
        "apiVersion": EXPORT_REQUESTS.api_version,
        "kind": "APIServiceExportRequest",
        "metadata": {"namespace": namespace, "generateName": f"{api}-"},
        "spec": {"resources": [{"group": group, "resource": resource, "versions": []}]},
    }


def test_a_binder_kubeconfig_creates_requests_only_for_its_own_allowed_apis(admin: Kube) -> None:
    def tenant(groups: tuple[str, ...]) -> Any:
        return bind(
            admin,
            BindingRequest(
                identity=f"dev-{uuid.uuid4().hex[:6]}",
                cluster_id="app-1",
                apis=(POSTGRES,),
                groups=groups,
            ),
        )

    a, b = tenant(("team-a",)), tenant(("team-a", "dbas"))
    try:
        own, other = a.consumer_namespace, b.consumer_namespace
        as_a = Kube(api_client(a.kubeconfig))

        # B is out of reach: its requests, exports, Secrets and namespace.
        assert forbidden(lambda: as_a.create(EXPORT_REQUESTS, export_request(other, POSTGRES)))
        assert forbidden(lambda: as_a.list(EXPORT_REQUESTS, other))
        assert forbidden(lambda: as_a.get(API_SERVICE_EXPORTS, other, POSTGRES))
        assert forbidden(lambda: as_a.get(SECRETS, other, BINDER_SECRET))
        assert forbidden(lambda: as_a.get(NAMESPACES, None, other))
        # Its own Secrets and the groups recorded on its own namespace too.
        assert forbidden(lambda: as_a.list(SECRETS, own))
        assert forbidden(lambda: as_a.get(SECRETS, own, BINDER_SECRET))
        assert forbidden(
            lambda: as_a.patch(
                NAMESPACES,
                None,
                own,
                {"metadata": {"annotations": {BIND_GROUPS_ANNOTATION: '{"groups": ["dbas"]}'}}},
            )
        )

        # A request for an API A's groups do not allow fails, and exports nothing.
        created = as_a.create(EXPORT_REQUESTS, export_request(own, BINDINGS))
        name = created["metadata"]["name"]
        deadline = time.monotonic() + 60
        while not (admin.get(EXPORT_REQUESTS, own, name) or {}).get("status", {}).get("phase"):
            assert time.monotonic() < deadline, "the request was never answered"
            time.sleep(0.5)
        status = admin.get(EXPORT_REQUESTS, own, name)["status"]
        assert status["phase"] == FAILED
        assert "only members of dbas may bind it; your groups: team-a" in status["terminalMessage"]
        assert admin.get(API_SERVICE_EXPORTS, own, BINDINGS) is None
        # ...while B, whose groups allow it, gets it answered with its own kubeconfig.
        as_b = Kube(api_client(b.kubeconfig))
        granted = as_b.create(EXPORT_REQUESTS, export_request(other, BINDINGS))
        deadline = time.monotonic() + 60
        while admin.get(API_SERVICE_EXPORTS, other, BINDINGS) is None:
            assert time.monotonic() < deadline, "B's request was never answered"
            time.sleep(0.5)
        phase = admin.get(EXPORT_REQUESTS, other, granted["metadata"]["name"])["status"]["phase"]
        assert phase == "Succeeded"
    finally:
        unbind(admin, a.consumer_namespace)
        unbind(admin, b.consumer_namespace)
