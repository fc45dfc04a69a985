"""The chart's CRDs on the real Control Plane, with real helm (v3, `make bins`): templates/crds.yaml
renders files/crds/, so `helm install` creates and `helm upgrade` patches them with field manager
`helm` (helm.sh/helm/v3 pkg/kube/client.go Update and createPatch: a three-way patch, manager
getManagedFieldsManager(), the binary's name), CRDs first (pkg/releaseutil/kind_sorter.go
InstallOrder), and `helm uninstall` keeps them (pkg/action/resource_policy.go
filterManifestsToKeep; an upgrade that drops them, pkg/kube/client.go Update, reads the live
annotation). The reconciler server-side applies its CRDs at every start without forcing
(klutch_gitops/kube/crds.py install_crds): an apply whose values equal Helm's shares the fields
instead of conflicting (sigs.k8s.io/structured-merge-diff/v6 merge/update.go Updater.update: a
conflict is another manager's field the apply modifies or adds), so a reconciler agrees with the
CRDs of its own release. With `crds.install=false` it is the sole owner, creating them with no
more than the chart's RBAC grants (create and patch by name: a server-side apply that creates
authorizes `create` with the object's name, k8s.io/apiserver pkg/endpoints/handlers/patch.go
createAuthorizerAttributes). A stand-in chart of a unique group (the real template and helpers
over a stand-in CRD) plays the chart, whose CRDs other tests share."""

from __future__ import annotations

import shutil
import subprocess
import time
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
from klutch_gitops.kube.client import Kube, Resource, api_client
from klutch_gitops.kube.crds import install_crds
from klutch_gitops.kube.resources import CRDS
from tests.conftest import TwinNamespace
from tests.helm import CHART, VALUE_SETS, render

V1_PATTERN = "^[0-9]+$"
V2_PATTERN = "^[0-9]+(Mi|Gi)$"  # a release that tightens a field, as 0.2.0 does durations
# What of klutch-gitops the stand-in chart takes: its CRD template and the helpers it includes.
TEMPLATES = ("crds.yaml", "_helpers.tpl")
VALUES = {"crds": {"install": True}, "nameOverride": "", "fullnameOverride": "", "commonLabels": {}}


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


def chart(directory: Path, crd: dict[str, Any], version: str, *, templated: bool = True) -> Path:
    """A chart holding ``crd`` as klutch-gitops 0.2.0 does (the real templates/crds.yaml and
    _helpers.tpl over files/crds/), or, not ``templated``, in crds/ as 0.1.0 did."""
    (directory / "templates").mkdir(parents=True)
    (directory / "Chart.yaml").write_text(
        yaml.safe_dump({"apiVersion": "v2", "name": "widgets", "version": version})
    )
    folder = directory / ("files/crds" if templated else "crds")
    folder.mkdir(parents=True)
    (folder / "widgets.yaml").write_text(yaml.safe_dump(crd))
    if templated:
        for name in TEMPLATES:
            shutil.copy(CHART / "templates" / name, directory / "templates" / name)
        (directory / "values.yaml").write_text(yaml.safe_dump(VALUES))
    return directory


def call(stack: StackInfo, tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``tool`` (helm, kubectl) run against the Control Plane."""
    program = binaries.require(tool)[tool]
    kubeconfig = stack.clusters["control-plane"].kubeconfig
    return subprocess.run(
        [str(program), "--kubeconfig", kubeconfig, *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def attempt(stack: StackInfo, tool: str, *args: str) -> str:
    """Its stderr when the command fails, else an empty string."""
    result = call(stack, tool, *args)
    return result.stderr if result.returncode else ""


def run(stack: StackInfo, tool: str, *args: str) -> str:
    result = call(stack, tool, *args)
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


def helm_fields(api: client.ApiClient, group: str) -> dict[str, Any]:
    crd = Kube(api).get(CRDS, None, f"widgets.{group}")
    assert crd is not None
    return crd["metadata"]


def test_helm_upgrades_the_templated_crds_and_the_reconciler_agrees(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    group: str,
    tmp_path: Path,
) -> None:
    api = clusters["control-plane"]
    old = chart(tmp_path / "old", widget_crd(group, V1_PATTERN), "0.1.0")
    new = chart(tmp_path / "new", widget_crd(group, V2_PATTERN), "0.2.0")
    name = f"widgets.{group}"
    started = time.monotonic()
    run(stack, "helm", "install", "widgets", str(old), "-n", namespace.name, "--wait")
    identity = as_reconciler(stack, Kube(api), namespace.name, name, tmp_path)
    try:
        assert helm_fields(api, group)["annotations"]["helm.sh/resource-policy"] == "keep"
        with identity as reconciler:
            install_crds(reconciler, [widget_crd(group, V1_PATTERN)])  # its first start
            run(stack, "helm", "upgrade", "widgets", str(new), "-n", namespace.name)
            assert live_pattern(api, group) == V2_PATTERN  # Helm updated it
            install_crds(reconciler, [widget_crd(group, V2_PATTERN)])  # the new Pod's start
            assert live_pattern(api, group) == V2_PATTERN
            assert managers(api, group) >= {"helm", "klutch-gitops"}
            # An old replica restarting now meets Helm's newer field: it stops with the cause.
            with pytest.raises(KlutchError) as refused:
                install_crds(reconciler, [widget_crd(group, V1_PATTERN)])
            assert '"helm"' in refused.value.message, refused.value.message
        # Turning crds.install off later removes them from the release, not from the cluster.
        run(
            stack,
            "helm",
            *("upgrade", "widgets", str(new), "-n", namespace.name, "--set", "crds.install=false"),
        )
        assert live_pattern(api, group) == V2_PATTERN
    finally:
        run(stack, "helm", "uninstall", "widgets", "-n", namespace.name)
    assert live_pattern(api, group) == V2_PATTERN  # helm.sh/resource-policy: keep
    # The kept CRDs still name the release (meta.helm.sh/release-name, -namespace): installing it
    # again under that name takes them back (pkg/action/validate.go checkOwnership).
    run(stack, "helm", "install", "widgets", str(new), "-n", namespace.name)
    run(stack, "helm", "uninstall", "widgets", "-n", namespace.name)
    assert live_pattern(api, group) == V2_PATTERN
    print(f"install, 2 upgrades, uninstall, reinstall: {time.monotonic() - started:.1f}s")


def test_without_crds_install_the_reconciler_creates_and_upgrades_them(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    group: str,
    tmp_path: Path,
) -> None:
    api = clusters["control-plane"]
    old = chart(tmp_path / "old", widget_crd(group, V1_PATTERN), "0.1.0")
    run(
        stack,
        "helm",
        "install",
        "widgets",
        str(old),
        "-n",
        namespace.name,
        "--set",
        "crds.install=false",
    )
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


def adopt(stack: StackInfo, crd: str, namespace: str) -> None:
    """The README's labels and annotations that let Helm adopt an existing CRD."""
    run(stack, "kubectl", "label", "crd", crd, "app.kubernetes.io/managed-by=Helm")
    run(
        stack,
        "kubectl",
        *("annotate", "crd", crd, "meta.helm.sh/release-name=widgets"),
        f"meta.helm.sh/release-namespace={namespace}",
    )


@pytest.mark.parametrize("how", ["take-ownership", "labels"])
def test_a_release_whose_crds_came_from_crds_dir_adopts_them(
    how: str,
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    group: str,
    tmp_path: Path,
) -> None:
    """0.1.0 kept its CRDs in crds/, which Helm creates without its ownership labels: an upgrade
    to the templates refuses them (helm.sh/helm/v3 pkg/action/validate.go
    existingResourceConflict, checkOwnership) until `--take-ownership` adopts them
    (requireAdoption) or they carry the release's labels and annotations."""
    api = clusters["control-plane"]
    old = chart(tmp_path / "old", widget_crd(group, V1_PATTERN), "0.1.0", templated=False)
    new = chart(tmp_path / "new", widget_crd(group, V2_PATTERN), "0.2.0")
    upgrade = ("upgrade", "widgets", str(new), "-n", namespace.name)
    run(stack, "helm", "install", "widgets", str(old), "-n", namespace.name)
    try:
        refused = attempt(stack, "helm", *upgrade)
        assert "exists and cannot be imported into the current release" in refused, refused
        assert live_pattern(api, group) == V1_PATTERN
        if how == "labels":
            adopt(stack, f"widgets.{group}", namespace.name)
            run(stack, "helm", *upgrade)
        else:
            run(stack, "helm", *upgrade, "--take-ownership")
        assert live_pattern(api, group) == V2_PATTERN
        meta = helm_fields(api, group)
        assert meta["annotations"]["meta.helm.sh/release-name"] == "widgets"
        assert meta["annotations"]["helm.sh/resource-policy"] == "keep"
        install_crds(api, [widget_crd(group, V2_PATTERN)])  # the new reconciler agrees
    finally:
        run(stack, "helm", "uninstall", "widgets", "-n", namespace.name)
    assert live_pattern(api, group) == V2_PATTERN
