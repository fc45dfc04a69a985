"""The chart's CRD upgrade path on the real Control Plane, with real helm: Helm creates `crds/`
on install with field manager `helm` (helm.sh/helm/v3 pkg/action/install.go installCRDs ->
pkg/kube/client.go Create, whose manager is getManagedFieldsManager(): the binary's name) and never
updates them; the reconciler server-side applies its CRDs at every start without forcing
(klutch_gitops/kube/crds.py install_crds). So a release that changes a CRD conflicts with Helm's
ownership, which the chart README's command resolves, and `--skip-crds` leaves the reconciler sole
owner, creating them with no more than the chart's RBAC grants (create and patch by name: a
server-side apply that creates authorizes `create` with the object's name, k8s.io/apiserver
pkg/endpoints/handlers/patch.go createAuthorizerAttributes). A stand-in CRD of a unique group
plays the chart's CRDs, which other tests share."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import CRDS, Kube, Resource, api_client
from klutch_gitops.kube.crds import install_crds
from tests.conftest import TwinNamespace
from tests.helm import VALUE_SETS, render

V1_PATTERN = "^[0-9]+$"
V2_PATTERN = "^[0-9]+(Mi|Gi)$"  # a release that tightens a field, as 0.2.0 does durations


def widget_crd(group: str, pattern: str) -> dict[str, Any]:
    size = {"type": "string", "pattern": pattern}
    spec = {"type": "object", "properties": {"size": size}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "names": {
                "kind": "Widget",
                "listKind": "WidgetList",
                "plural": "widgets",
                "singular": "widget",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec}}},
                }
            ],
        },
    }


def chart(directory: Path, crd: dict[str, Any], version: str) -> Path:
    """A chart whose crds/ holds ``crd``, as klutch-gitops' holds its CRDs."""
    (directory / "crds").mkdir(parents=True)
    (directory / "templates").mkdir()
    (directory / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": "widgets", "version": version})
    )
    (directory / "crds" / "widgets.yaml").write_text(yaml.safe_dump(crd))
    return directory


def run(stack: StackInfo, tool: str, *args: str, stdin: str | None = None) -> str:
    program = binaries.require(tool)[tool]
    kubeconfig = stack.clusters["control-plane"].kubeconfig
    result = subprocess.run(
        [str(program), "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, f"{tool} {' '.join(args)}: {result.stderr}"
    return result.stdout


@pytest.fixture
def group(clusters: dict[str, client.ApiClient]) -> Iterator[str]:
    name = f"chart-crds-{uuid.uuid4().hex[:8]}.example.com"
    yield name
    Kube(clusters["control-plane"]).delete(CRDS, None, f"widgets.{name}")


RBAC = "rbac.authorization.k8s.io"
CLUSTER_ROLES = Resource(RBAC, "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = Resource(RBAC, "v1", "clusterrolebindings", "ClusterRoleBinding", False)


def charts_crd_rule() -> dict[str, Any]:
    """The reconciler's rule on its CRDs, as the chart renders it."""
    [role] = [
        doc
        for doc in render([VALUE_SETS["default"]])
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"].endswith("-reconciler")
    ]
    [rule] = [
        rule
        for rule in role["rules"]
        if rule["resources"] == ["customresourcedefinitions"] and "create" in rule["verbs"]
    ]
    return rule


@contextmanager
def as_reconciler(
    stack: StackInfo, admin: Kube, namespace: str, crd: str, directory: Path
) -> Iterator[client.ApiClient]:
    """A ServiceAccount holding the chart's CRD rule, narrowed to ``crd``, and its client."""
    rule = {**charts_crd_rule(), "resourceNames": [crd]}
    name = f"chart-crds-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(admin.api).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    admin.create(CLUSTER_ROLES, {"metadata": {"name": name}, "rules": [rule]})
    admin.create(
        CLUSTER_ROLE_BINDINGS,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": RBAC, "kind": "ClusterRole", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    token = (
        client.CoreV1Api(admin.api)
        .create_namespaced_service_account_token(
            name, namespace, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec())
        )
        .status.token
    )
    kubeconfig = yaml.safe_load(Path(stack.clusters["control-plane"].kubeconfig).read_text())
    kubeconfig["users"] = [{"name": name, "user": {"token": token}}]
    for context in kubeconfig["contexts"]:
        context["context"]["user"] = name
    (directory / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    try:
        yield api_client(directory / "kubeconfig")
    finally:
        admin.delete(CLUSTER_ROLE_BINDINGS, None, name)
        admin.delete(CLUSTER_ROLES, None, name)


def live_pattern(api: client.ApiClient, group: str) -> str:
    crd = Kube(api).get(CRDS, None, f"widgets.{group}")
    assert crd is not None
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema["properties"]["spec"]["properties"]["size"]["pattern"]


def managers(api: client.ApiClient, group: str) -> set[str]:
    crd = Kube(api).get(CRDS, None, f"widgets.{group}")
    assert crd is not None
    return {entry["manager"] for entry in crd["metadata"]["managedFields"]}


def test_helm_created_crds_need_the_readmes_apply_before_an_upgrade(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    group: str,
    tmp_path: Path,
) -> None:
    api = clusters["control-plane"]
    old = chart(tmp_path / "old", widget_crd(group, V1_PATTERN), "0.1.0")
    new = chart(tmp_path / "new", widget_crd(group, V2_PATTERN), "0.2.0")
    run(stack, "helm", "install", "widgets", str(old), "-n", namespace.name, "--wait")
    try:
        assert "helm" in managers(api, group)
        install_crds(api, [widget_crd(group, V1_PATTERN)])  # the old reconciler: same values
        # helm upgrade leaves crds/ alone; the new reconciler's apply meets Helm's ownership.
        run(stack, "helm", "upgrade", "widgets", str(new), "-n", namespace.name)
        assert live_pattern(api, group) == V1_PATTERN
        with pytest.raises(KlutchError) as refused:
            install_crds(api, [widget_crd(group, V2_PATTERN)])
        assert "was not applied" in refused.value.message
        assert '"helm"' in refused.value.message, refused.value.message
        # The chart README's step before `helm upgrade` (`helm show crds <chart>`).
        crds = run(stack, "helm", "show", "crds", str(new))
        run(
            stack,
            "kubectl",
            *("apply", "--server-side", "--force-conflicts", "--field-manager=klutch-gitops"),
            *("-f", "-"),
            stdin=crds,
        )
        install_crds(api, [widget_crd(group, V2_PATTERN)])  # the new reconciler starts
        assert live_pattern(api, group) == V2_PATTERN
    finally:
        run(stack, "helm", "uninstall", "widgets", "-n", namespace.name)
    assert live_pattern(api, group) == V2_PATTERN  # Helm never deletes crds/


def test_with_skip_crds_the_reconciler_owns_and_upgrades_them(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    group: str,
    tmp_path: Path,
) -> None:
    api = clusters["control-plane"]
    old = chart(tmp_path / "old", widget_crd(group, V1_PATTERN), "0.1.0")
    run(stack, "helm", "install", "widgets", str(old), "-n", namespace.name, "--skip-crds")
    identity = as_reconciler(stack, Kube(api), namespace.name, f"widgets.{group}", tmp_path)
    try:
        assert Kube(api).get(CRDS, None, f"widgets.{group}") is None
        with identity as reconciler:
            install_crds(reconciler, [widget_crd(group, V1_PATTERN)])  # its first start
            install_crds(reconciler, [widget_crd(group, V2_PATTERN)])  # after an upgrade
        assert live_pattern(api, group) == V2_PATTERN
        owners = managers(api, group) - {"kube-apiserver"}  # which writes the status
        assert owners == {"klutch-gitops"}
    finally:
        run(stack, "helm", "uninstall", "widgets", "-n", namespace.name)
