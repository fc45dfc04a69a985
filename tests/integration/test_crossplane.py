"""Crossplane core on the Control Plane: its CRDs are served and it really composes.

The Composition composes a kind every cluster has, a ClusterRole, through the stack's own
composition function (function-klutch-local's ``template`` composer: Crossplane 2 composes only
through function pipelines). That is enough to see the whole chain work: XRD → XR and claim
CRDs → claim → XR → function → composed resource with a field of the claim → Ready → deletion,
on both Crossplane lines the stack runs (2.x, the session stack's, and 1.20: catalogstack).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from klutch_gitops.dev.localstack import crossplane
from klutch_gitops.dev.localstack.stack import StackInfo

from .catalogstack import LINE_IDS, LINES, clusterrole_step, clusters_for_line, stack_for_line
from .test_clusters import eventually, status_of

pytestmark = pytest.mark.crossplane

XP_GROUP, XP_VERSION = "apiextensions.crossplane.io", "v1"
VERSION = "v1alpha1"


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in (obj.get("status") or {}).get("conditions") or []}


def crd_established(api: client.ApiextensionsV1Api, name: str) -> bool:
    try:
        crd = api.read_custom_resource_definition(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return any(c.type == "Established" and c.status == "True" for c in crd.status.conditions or [])


@pytest.fixture(scope="module", params=LINES, ids=LINE_IDS)
def line_stack(request: pytest.FixtureRequest) -> StackInfo:
    return stack_for_line(request)


@pytest.fixture(scope="module")
def line_clusters(
    line_stack: StackInfo, request: pytest.FixtureRequest
) -> dict[str, client.ApiClient]:
    return clusters_for_line(line_stack, request)


@pytest.fixture
def claim_namespace(line_clusters: dict[str, client.ApiClient]) -> Iterator[str]:
    name = f"widgets-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(line_clusters["control-plane"])
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    core.delete_namespace(name)


def test_crossplane_crds_are_established_on_the_control_plane_only(
    line_stack: StackInfo, line_clusters: dict[str, client.ApiClient]
) -> None:
    clusters = line_clusters
    crd_dir = crossplane.programs(line_stack.crossplane)["crossplane-crds"]
    names = [crd["metadata"]["name"] for crd in crossplane.load_crds(crd_dir)]
    assert "compositeresourcedefinitions.apiextensions.crossplane.io" in names
    control_plane = client.ApiextensionsV1Api(clusters["control-plane"])
    assert [n for n in names if not crd_established(control_plane, n)] == []
    app = client.ApiextensionsV1Api(clusters["app"])
    assert not crd_established(app, "compositeresourcedefinitions.apiextensions.crossplane.io")


@pytest.fixture
def widget_api(line_clusters: dict[str, client.ApiClient]) -> Iterator[str]:
    """An XRD with claim names, and a pipeline Composition for it; yields the API group."""
    group = f"w{uuid.uuid4().hex[:8]}.test.klutch.example"
    custom = client.CustomObjectsApi(line_clusters["control-plane"])
    xrd = {
        "apiVersion": f"{XP_GROUP}/{XP_VERSION}",
        "kind": "CompositeResourceDefinition",
        "metadata": {"name": f"xwidgets.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "XWidget", "plural": "xwidgets"},
            "claimNames": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "referenceable": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "string"}},
                                    "required": ["size"],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    composition = {
        "apiVersion": f"{XP_GROUP}/{XP_VERSION}",
        "kind": "Composition",
        "metadata": {"name": f"widgets-{group}"},
        "spec": {
            "compositeTypeRef": {"apiVersion": f"{group}/{VERSION}", "kind": "XWidget"},
            "mode": "Pipeline",
            "pipeline": [clusterrole_step()],
        },
    }
    custom.create_cluster_custom_object(XP_GROUP, XP_VERSION, "compositeresourcedefinitions", xrd)
    custom.create_cluster_custom_object(XP_GROUP, XP_VERSION, "compositions", composition)
    yield group
    custom.delete_cluster_custom_object(
        XP_GROUP, XP_VERSION, "compositions", composition["metadata"]["name"]
    )
    custom.delete_cluster_custom_object(
        XP_GROUP, XP_VERSION, "compositeresourcedefinitions", xrd["metadata"]["name"]
    )
    extensions = client.ApiextensionsV1Api(line_clusters["control-plane"])
    eventually(  # Crossplane deletes what it defined before it lets the XRD go
        lambda: (
            status_of(lambda: extensions.read_custom_resource_definition(f"widgets.{group}")) == 404
        ),
        "Crossplane to remove the claim CRD of the deleted XRD",
    )


def test_xrd_is_offered_and_a_claim_is_composed(
    line_clusters: dict[str, client.ApiClient], claim_namespace: str, widget_api: str
) -> None:
    group, api = widget_api, line_clusters["control-plane"]
    custom = client.CustomObjectsApi(api)
    extensions = client.ApiextensionsV1Api(api)

    def xrd() -> dict[str, Any]:
        return custom.get_cluster_custom_object(
            XP_GROUP, XP_VERSION, "compositeresourcedefinitions", f"xwidgets.{group}"
        )

    eventually(
        lambda: conditions(xrd()) == {"Established": "True", "Offered": "True"},
        "the XRD to be Established and Offered",
    )
    assert crd_established(extensions, f"xwidgets.{group}")
    assert crd_established(extensions, f"widgets.{group}")
    assert extensions.read_custom_resource_definition(f"widgets.{group}").spec.scope == "Namespaced"

    def claim(size: Any) -> dict[str, Any]:
        return {
            "apiVersion": f"{group}/{VERSION}",
            "kind": "Widget",
            "metadata": {"name": "my-widget"},
            "spec": {"size": size},
        }

    rejected = status_of(
        lambda: custom.create_namespaced_custom_object(
            group, VERSION, claim_namespace, "widgets", claim(3)
        )
    )
    assert rejected == 422  # the claim CRD carries the XRD's schema
    custom.create_namespaced_custom_object(
        group, VERSION, claim_namespace, "widgets", claim("large")
    )

    def widget() -> dict[str, Any]:
        return custom.get_namespaced_custom_object(
            group, VERSION, claim_namespace, "widgets", "my-widget"
        )

    eventually(
        lambda: conditions(widget()) == {"Synced": "True", "Ready": "True"},
        "Crossplane to compose the claim and report it Ready",
    )
    xr_name = widget()["spec"]["resourceRef"]["name"]
    rbac = client.RbacAuthorizationV1Api(api)
    selector = f"crossplane.io/claim-namespace={claim_namespace},crossplane.io/claim-name=my-widget"
    roles = rbac.list_cluster_role(label_selector=selector).items
    assert [r.metadata.annotations["size"] for r in roles] == ["large"]
    owner = roles[0].metadata.owner_references[0]
    assert (owner.kind, owner.name, owner.controller) == ("XWidget", xr_name, True)

    # The claim takes its XR along. The ClusterRole then goes with the garbage collector, which
    # learns new kinds by discovery every 30 s: that is Kubernetes' part, not awaited here.
    custom.delete_namespaced_custom_object(group, VERSION, claim_namespace, "widgets", "my-widget")
    eventually(
        lambda: (
            status_of(lambda: custom.get_cluster_custom_object(group, VERSION, "xwidgets", xr_name))
            == 404
        ),
        "the claim's XR to be deleted with it",
    )
