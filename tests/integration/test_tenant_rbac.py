"""A tenant reads and steers its own RepositoryBindings with its binder kubeconfig, on a real
Control Plane: list, get and watch them, set the steering annotations, and nothing more (its Role
from klutch_gitops/consumer.py and the admission policy catalog/policies/
repositorybinding-steering.yaml); another tenant's namespace stays closed."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import typer
from kubernetes import client
from typer.testing import CliRunner

from klutch_gitops.apis import REPOSITORY_BINDINGS, REQUESTED_AT_ANNOTATION, SUSPEND_ANNOTATION
from klutch_gitops.errors import KlutchError
from klutch_gitops.inspect import commands
from klutch_gitops.kube.client import Kube, KubeError, api_client
from klutch_gitops.kube.resources import CLUSTER_ROLES, NAMESPACES, ROLE_BINDINGS
from klutch_gitops.policies import install_policies, load_policies
from tests.env import Env
from tests.helm import VALUE_SETS, render
from tests.kit.tenant import Tenant, repository_binding
from tests.kit.wait import eventually

URL = "https://git.example/team.git"


def binder_file(tenant: Tenant) -> Path:
    path = tenant.config.repositories[0].control_plane_kubeconfig.file
    assert path is not None
    return path


@pytest.fixture
def tenants(env: Env) -> tuple[Tenant, Tenant]:
    """Two bound consumers, each with a RepositoryBinding ``team`` the bind API would make; the
    admission policies as the reconciler applies them at start."""
    install_policies(env.clusters["control-plane"], load_policies())
    pair = []
    for name in ("one", "two"):
        (env.tmp_path / name).mkdir()
        tenant = env.tenant(home=env.tmp_path / name, start=False)
        tenant.control_plane.create(
            REPOSITORY_BINDINGS, repository_binding(tenant.consumer, "team", URL, tenant.namespace)
        )
        env.cleanup.append(
            lambda t=tenant: t.control_plane.delete(REPOSITORY_BINDINGS, t.consumer, "team")
        )
        pair.append(tenant)
    return pair[0], pair[1]


def test_a_tenant_lists_and_watches_its_own_bindings_only(tenants: tuple[Tenant, Tenant]) -> None:
    mine, other = tenants
    binder = Kube(api_client(binder_file(mine)))
    items, version = binder.list(REPOSITORY_BINDINGS, mine.consumer)
    assert [item["metadata"]["name"] for item in items] == ["team"]
    assert binder.get(REPOSITORY_BINDINGS, mine.consumer, "team") is not None
    events = binder.watch(REPOSITORY_BINDINGS, mine.consumer, version, timeout_seconds=1)
    assert [kind for kind, _ in events] == []  # allowed: the watch opens and times out quietly
    for call in (
        lambda: binder.list(REPOSITORY_BINDINGS, other.consumer),
        lambda: binder.get(REPOSITORY_BINDINGS, other.consumer, "team"),
        lambda: binder.list(REPOSITORY_BINDINGS),  # all namespaces
        lambda: binder.patch(
            REPOSITORY_BINDINGS, other.consumer, "team", {"metadata": {"annotations": {"a": "b"}}}
        ),
    ):
        with pytest.raises(KubeError) as denied:
            call()
        assert denied.value.status == 403


def test_a_tenant_changes_annotations_and_nothing_else(tenants: tuple[Tenant, Tenant]) -> None:
    mine, _ = tenants
    binder = Kube(api_client(binder_file(mine)))
    steered = binder.patch(
        REPOSITORY_BINDINGS,
        mine.consumer,
        "team",
        {"metadata": {"annotations": {SUSPEND_ANNOTATION: "true", REQUESTED_AT_ANNOTATION: "t1"}}},
    )
    assert steered["metadata"]["annotations"][SUSPEND_ANNOTATION] == "true"
    refused = {
        "spec": {"spec": {"appNamespaces": ["someone-elses"]}},
        "labels": {"metadata": {"labels": {"x": "y"}}},
        "finalizers": {"metadata": {"finalizers": ["example.com/keep"]}},
    }
    for what, patch in refused.items():
        with pytest.raises(KubeError) as denied:
            binder.patch(REPOSITORY_BINDINGS, mine.consumer, "team", patch)
        assert denied.value.status in (403, 422), what
        assert "may not change a RepositoryBinding's" in denied.value.message, what
    with pytest.raises(KubeError) as denied:  # no verb on the status subresource
        binder.patch(
            REPOSITORY_BINDINGS, mine.consumer, "team", {"status": {"claims": 9}}, "status"
        )
    assert denied.value.status == 403
    for verb in (
        lambda: binder.delete(REPOSITORY_BINDINGS, mine.consumer, "team"),
        lambda: binder.create(
            REPOSITORY_BINDINGS, repository_binding(mine.consumer, "more", URL, mine.namespace)
        ),
    ):
        with pytest.raises(KubeError) as denied:
            verb()
        assert denied.value.status == 403
    live = mine.control_plane.get(REPOSITORY_BINDINGS, mine.consumer, "team")
    assert live is not None
    assert live["spec"]["appNamespaces"] == [mine.namespace]
    assert "labels" not in live["metadata"]


def test_the_tenant_uses_the_cli_with_its_binder_kubeconfig(tenants: tuple[Tenant, Tenant]) -> None:
    mine, other = tenants
    app = typer.Typer()
    commands.register(app)
    runner = CliRunner()
    kubeconfig = str(binder_file(mine))  # its context's namespace is the consumer's
    listed = runner.invoke(app, ["get", "--kubeconfig", kubeconfig])
    assert listed.exit_code == 0, listed.output
    assert listed.output.splitlines()[1].split()[0] == "team"
    for args in (["suspend", "team"], ["resume", "team", "--no-wait"]):
        result = runner.invoke(app, [*args, "--kubeconfig", kubeconfig])
        assert result.exit_code == 0, result.output
    live = mine.control_plane.get(REPOSITORY_BINDINGS, mine.consumer, "team") or {}
    annotations = live["metadata"]["annotations"]
    assert SUSPEND_ANNOTATION not in annotations  # resume removed it and requested a pass
    assert annotations[REQUESTED_AT_ANNOTATION].endswith("Z")
    denied = runner.invoke(app, ["get", "-n", other.consumer, "--kubeconfig", kubeconfig])
    assert isinstance(denied.exception, KlutchError)
    assert denied.exception.message.startswith(
        f"forbidden: you may not list repositorybindings.gitops.klutch.anynines.com in namespace "
        f"{other.consumer}"
    )
    assert "klutch-gitops-repositorybindings-view" in denied.exception.fix
    missing = runner.invoke(app, ["reconcile", "nosuch", "--kubeconfig", kubeconfig])
    assert isinstance(missing.exception, KlutchError)
    assert missing.exception.message == (
        f"RepositoryBinding nosuch not found in namespace {mine.consumer}"
    )


def test_the_charts_aggregated_roles_reach_view_and_edit(
    clusters: dict[str, client.ApiClient], cleanup: list[Callable[[], Any]]
) -> None:
    """The chart's ClusterRoles, applied to a real Control Plane, join Kubernetes' view and edit
    through the clusterrole-aggregation controller: a person bound to view in a namespace may list
    RepositoryBindings there and not patch them; bound to edit, may patch them."""
    admin = Kube(clusters["control-plane"])
    for doc in render([VALUE_SETS["default"]]):
        if doc["kind"] == "ClusterRole" and "repositorybindings" in doc["metadata"]["name"]:
            admin.apply(CLUSTER_ROLES, doc, field_manager="test-chart")
            cleanup.append(lambda n=doc["metadata"]["name"]: admin.delete(CLUSTER_ROLES, None, n))
    namespace = f"rb-{uuid.uuid4().hex[:6]}"
    admin.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    cleanup.append(lambda: admin.delete(NAMESPACES, None, namespace))
    for role in ("view", "edit"):
        admin.create(ROLE_BINDINGS, role_binding_to(namespace, role, f"{role}-person"))

    def allowed(user: str, verb: str) -> bool:
        review = client.AuthorizationV1Api(clusters["control-plane"]).create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=user,
                    resource_attributes=client.V1ResourceAttributes(
                        namespace=namespace,
                        verb=verb,
                        group=REPOSITORY_BINDINGS.group,
                        resource=REPOSITORY_BINDINGS.plural,
                    ),
                )
            )
        )
        return bool(review.status.allowed)

    eventually(
        lambda: allowed("view-person", "list") and allowed("edit-person", "patch"),
        "view and edit aggregate the chart's RepositoryBinding roles",
        30,
    )
    assert allowed("view-person", "watch")
    assert not allowed("view-person", "patch")
    assert not allowed("edit-person", "delete")  # bindings come and go through the bind API


def role_binding_to(namespace: str, cluster_role: str, user: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": cluster_role, "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role,
        },
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
