"""The CRD files: well-formed, named by convention, structural, and split between the clusters."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.crds import CRD_DIR, load_crds

BIND = "klutch.anynines.com"
# file name -> (group, kind, plural)
EXPECTED = {
    f"{BIND}_apiserviceexportrequests.yaml": (
        BIND,
        "APIServiceExportRequest",
        "apiserviceexportrequests",
    ),
    f"{BIND}_apiserviceexports.yaml": (BIND, "APIServiceExport", "apiserviceexports"),
    f"{BIND}_apiservicebindings.yaml": (BIND, "APIServiceBinding", "apiservicebindings"),
    f"{BIND}_apiservicenamespaces.yaml": (BIND, "APIServiceNamespace", "apiservicenamespaces"),
    f"{BIND}_clusterbindings.yaml": (BIND, "ClusterBinding", "clusterbindings"),
    f"{BIND}_apiserviceexporttemplates.yaml": (
        BIND,
        "APIServiceExportTemplate",
        "apiserviceexporttemplates",
    ),
    f"example-backend.{BIND}_apiserviceexporttemplates.yaml": (
        f"example-backend.{BIND}",
        "APIServiceExportTemplate",
        "apiserviceexporttemplates",
    ),
    "gitops.klutch.anynines.com_repositorybindings.yaml": (
        "gitops.klutch.anynines.com",
        "RepositoryBinding",
        "repositorybindings",
    ),
}


def load(name: str) -> dict[str, Any]:
    documents = list(yaml.safe_load_all((CRD_DIR / name).read_text()))
    assert len(documents) == 1
    return documents[0]


def schema_of(crd: dict[str, Any]) -> dict[str, Any]:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below ``schema``, with a dotted path for messages."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")


def test_the_directory_holds_exactly_the_expected_files() -> None:
    assert {p.name for p in Path(CRD_DIR).glob("*.yaml")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_crd_is_a_v1_crd_named_by_convention(name: str) -> None:
    group, kind, plural = EXPECTED[name]
    crd = load(name)
    assert (crd["apiVersion"], crd["kind"]) == (
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
    )
    assert crd["metadata"]["name"] == f"{plural}.{group}"
    assert name == f"{group}_{plural}.yaml"
    spec = crd["spec"]
    # Klutch's APIServiceBinding is cluster-scoped (apiservicebinding_types.go, scope=Cluster).
    scope = "Cluster" if kind == "APIServiceBinding" else "Namespaced"
    assert (spec["group"], spec["scope"]) == (group, scope)
    assert spec["names"]["kind"] == kind
    assert spec["names"]["plural"] == plural
    assert spec["names"]["singular"] == kind.lower()
    assert spec["names"]["listKind"] == f"{kind}List"
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    assert {"spec", "status"} <= set(schema_of(crd)["properties"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_schema_is_structural_and_described(name: str) -> None:
    root = schema_of(load(name))
    assert root["description"]
    for path, node in nodes(root):
        assert "type" in node, f"{path} has no type"
        if node["type"] == "object" and path not in (".metadata", ".spec", ".status"):
            assert node.get("properties") or node.get("x-kubernetes-preserve-unknown-fields"), (
                f"{path} is an object without fields"
            )
    for path in (".spec", ".status"):
        assert dict(nodes(root))[path]["description"], f"{path} has no description"


def test_every_repository_binding_field_is_described_on_one_line() -> None:
    root = schema_of(load("gitops.klutch.anynines.com_repositorybindings.yaml"))
    for path, node in nodes(root):
        if path.startswith((".spec", ".status")) and not path.endswith("[]"):
            assert node.get("description"), f"{path} has no description"
            assert "\n" not in node["description"].strip(), f"{path}: description spans lines"


def test_repository_binding_printer_columns() -> None:
    crd = load("gitops.klutch.anynines.com_repositorybindings.yaml")
    columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
    assert [c["name"] for c in columns if not c.get("priority")] == [
        "URL",
        "Branch",
        "Ready",
        "Age",
    ]


def test_both_template_kinds_share_one_schema() -> None:
    ours = load(f"{BIND}_apiserviceexporttemplates.yaml")["spec"]["versions"]
    klutchs = load(f"example-backend.{BIND}_apiserviceexporttemplates.yaml")["spec"]["versions"]
    assert ours == klutchs
    selector = schema_of(load(f"{BIND}_apiserviceexporttemplates.yaml"))["properties"]["spec"]
    assert set(selector["properties"]["APIServiceSelector"]["properties"]) == {
        "group",
        "resource",
        "version",
    }


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_conditions_are_metav1_conditions_keyed_by_type(name: str) -> None:
    status = schema_of(load(name))["properties"]["status"]
    conditions = status.get("properties", {}).get("conditions")
    if conditions is None:
        assert name.endswith(("apiservicenamespaces.yaml", "apiserviceexporttemplates.yaml"))
        return
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    item = conditions["items"]
    # Klutch's APIServiceBinding conditions carry a severity, which kubectl-bind writes
    # (klutchio bind/pkg/kubectl/bind-apiservice/plugin/servicebindings.go).
    severity = {"severity"} if name.endswith("apiservicebindings.yaml") else set()
    assert set(item["properties"]) == {
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
        "observedGeneration",
        *severity,
    }
    assert item["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
    assert "type" in item["required"]


URL_PATTERN = re.compile(
    schema_of(load("gitops.klutch.anynines.com_repositorybindings.yaml"))["properties"]["spec"][
        "properties"
    ]["url"]["pattern"]
)


@pytest.mark.parametrize(
    "url",
    [
        "https://git.example.com/team/app.git",
        "https://git.example.com:8443/team/app",
        "ssh://git.example.com/team/app.git",
        "ssh://git@git.example.com:2222/team/app.git",
        "git@github.com:team/app.git",
    ],
)
def test_url_pattern_accepts(url: str) -> None:
    assert URL_PATTERN.search(url)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "http://git.example.com/app.git",
        "https://user:token@git.example.com/app.git",
        "ssh://-oProxyCommand=x/app.git",
        "git@-oProxyCommand=x:app.git",
        "ssh://-oProxyCommand=x@git.example.com/app.git",
        "git@git.example.com:-oProxyCommand=x",
        "file:///srv/git/app.git",
        "file:///etc",
        "git@file:///etc",
        "file://relative/app.git",
        "ext::sh -c touch% /tmp/x",
        "ext::sh",
        "fd::3",
        "/srv/git/app.git",
        "https://git.example.com/app .git",
    ],
)
def test_url_pattern_rejects(url: str) -> None:
    assert not URL_PATTERN.search(url)


def test_load_crds_puts_only_the_binding_on_the_app_cluster() -> None:
    app = load_crds(cluster="app")
    control_plane = load_crds(cluster="control-plane")
    assert [c["spec"]["names"]["kind"] for c in app] == ["APIServiceBinding"]
    assert len(control_plane) == len(EXPECTED) - 1
    assert "APIServiceBinding" not in {c["spec"]["names"]["kind"] for c in control_plane}
    assert {c["metadata"]["name"] for c in app + control_plane} == {
        load(name)["metadata"]["name"] for name in EXPECTED
    }


def test_load_crds_refuses_an_unknown_cluster() -> None:
    with pytest.raises(KlutchError, match="unknown cluster 'kind'"):
        load_crds(cluster="kind")
