"""Security tier, binder kubeconfigs with what kubectl-bind and Klutch's konnector need.

Two tenants bound with real RBAC on the real Control Plane, the reconciler's export request and
namespace controllers running. A's binder kubeconfig reads A's own consumer namespace object and
its Secrets, as Klutch's binder does (the konnector's Secret informer and its namespace get), and
updates existing Secrets in A's mapped namespaces (the konnector's makeProviderOwner). With it an
attacker tries to reach B (B's requests, exports, Secrets, namespace and mapped namespace), to
write Secrets in A's own namespaces beyond that Update, to rewrite the groups recorded on A's
namespace, and to get an export of an API A's groups do not allow by creating the request itself.
Each attempt is a 403 (a 404 for an Update of a Secret that does not exist, which creates
nothing), or a request answered ``Failed`` with nothing exported.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from bind_api.bindings import BINDER_SECRET, BindingRequest, bind, unbind
from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    BIND_GROUPS_ANNOTATION,
    CLUSTER_BINDINGS,
    EXPORT_REQUESTS,
)
from klutch_gitops.exports import FAILED
from klutch_gitops.kube.client import Kube, KubeError, api_client
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from reconciler.controllers.export_requests import ExportRequestController
from reconciler.controllers.namespaces import NamespaceController
from tests.integration.bindapi import offer, withdraw

POSTGRES = "postgresqlinstances.anynines.com"
OWNER = "klutch.anynines.com/resource-owner"
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
    namespaces = NamespaceController(admin).start()
    yield admin
    namespaces.stop()
    controller.stop()
    withdraw(admin, namespace)


def forbidden(call: Callable[[], Any]) -> bool:
    try:
        call()
    except KubeError as error:
        return error.status == 403
    return False


def mapped_namespace(admin: Kube, binder: Kube, consumer: str, app_namespace: str) -> str:
    """What the konnector does for App namespace ``app_namespace``: an APIServiceNamespace made
    with the binder kubeconfig, mapped by the controller; a provider's Secret placed in it."""
    binder.create(
        API_SERVICE_NAMESPACES,
        {
            "apiVersion": API_SERVICE_NAMESPACES.api_version,
            "kind": "APIServiceNamespace",
            "metadata": {"name": app_namespace, "namespace": consumer},
        },
    )
    deadline = time.monotonic() + 60
    while True:
        mapping = admin.get(API_SERVICE_NAMESPACES, consumer, app_namespace) or {}
        if target := (mapping.get("status") or {}).get("namespace"):
            break
        assert time.monotonic() < deadline, f"{consumer}/{app_namespace} was never mapped"
        time.sleep(0.5)
    admin.create(SECRETS, secret(target, "db-conn"))
    return target


def secret(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"password": "c2VjcmV0"},
    }


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

        as_b = Kube(api_client(b.kubeconfig))
        own_mapped = mapped_namespace(admin, as_a, own, "team")
        other_mapped = mapped_namespace(admin, as_b, other, "team")

        # B is out of reach: its requests, exports, Secrets, namespace and mapped namespace.
        assert forbidden(lambda: as_a.create(EXPORT_REQUESTS, export_request(other, POSTGRES)))
        assert forbidden(lambda: as_a.list(EXPORT_REQUESTS, other))
        assert forbidden(lambda: as_a.get(API_SERVICE_EXPORTS, other, POSTGRES))
        assert forbidden(lambda: as_a.get(SECRETS, other, BINDER_SECRET))
        assert forbidden(lambda: as_a.list(SECRETS, other))
        assert forbidden(lambda: as_a.get(NAMESPACES, None, other))
        assert forbidden(lambda: as_a.list(NAMESPACES))
        beat = {"status": {"lastHeartbeatTime": "2026-11-24T10:00:00Z"}}
        assert forbidden(
            lambda: as_a.patch(CLUSTER_BINDINGS, other, "cluster", beat, subresource="status")
        )
        assert as_a.patch(CLUSTER_BINDINGS, own, "cluster", beat, subresource="status")  # its own
        assert forbidden(lambda: as_a.patch(CLUSTER_BINDINGS, own, "cluster", {"spec": {}}))
        theirs = admin.get(SECRETS, other_mapped, "db-conn")
        assert forbidden(lambda: as_a.get(SECRETS, other_mapped, "db-conn"))
        assert forbidden(lambda: as_a.replace(SECRETS, theirs))

        # Its own consumer namespace: the object and its Secrets readable (Klutch's binder has
        # get namespaces and get/list/watch secrets), never written.
        assert as_a.get(NAMESPACES, None, own)["metadata"]["name"] == own
        assert as_a.get(SECRETS, own, BINDER_SECRET) is not None
        assert BINDER_SECRET in [s["metadata"]["name"] for s in as_a.list(SECRETS, own)[0]]
        mine = admin.get(SECRETS, own, BINDER_SECRET)
        assert forbidden(lambda: as_a.create(SECRETS, secret(own, "planted")))
        assert forbidden(lambda: as_a.replace(SECRETS, mine))
        assert forbidden(lambda: as_a.delete(SECRETS, own, BINDER_SECRET))
        assert forbidden(
            lambda: as_a.patch(
                NAMESPACES,
                None,
                own,
                {"metadata": {"annotations": {BIND_GROUPS_ANNOTATION: '{"groups": ["dbas"]}'}}},
            )
        )

        # Its own mapped namespace: an existing Secret may be updated (the konnector's mark),
        # nothing created (an Update of a missing Secret is a 404), nothing deleted.
        provided = admin.get(SECRETS, own_mapped, "db-conn")
        provided["metadata"].setdefault("annotations", {})[OWNER] = "Provider"
        marked = as_a.replace(SECRETS, provided)
        assert marked["metadata"]["annotations"][OWNER] == "Provider"
        assert forbidden(lambda: as_a.create(SECRETS, secret(own_mapped, "planted")))
        with pytest.raises(KubeError) as missing:
            as_a.replace(SECRETS, secret(own_mapped, "planted"))
        assert missing.value.status == 404
        assert admin.get(SECRETS, own_mapped, "planted") is None
        assert forbidden(lambda: as_a.delete(SECRETS, own_mapped, "db-conn"))
        assert forbidden(
            lambda: as_a.patch(SECRETS, own_mapped, "db-conn", {"data": {"password": ""}})
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
