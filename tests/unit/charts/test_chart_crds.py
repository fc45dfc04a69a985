"""charts/klutch-gitops `crds.install`: the CRDs of files/crds/ rendered as templates (so `helm
upgrade` updates them) that `helm uninstall` keeps, or none with the reconciler creating them; the
reconciler's metrics token set twice is refused naming both values; the chart's home is the
project's."""

from __future__ import annotations

import tomllib

import pytest
import yaml

from klutch_gitops.kube.crds import load_crds
from tests.helm import CHART, VALUE_SETS, render, template

BASE = [VALUE_SETS["default"]]  # the bind API's required values
KEEP = {"helm.sh/resource-policy": "keep"}


def crds(docs: list[dict]) -> dict[str, dict]:
    return {
        doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "CustomResourceDefinition"
    }


def reconciler_crd_rule(docs: list[dict]) -> dict:
    [rule] = [
        rule
        for doc in docs
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"].endswith("-reconciler")
        for rule in doc["rules"]
        if rule["resources"] == ["customresourcedefinitions"] and "create" in rule["verbs"]
    ]
    return rule


def test_the_crds_are_templates_that_uninstall_keeps() -> None:
    """Each rendered CRD is the catalog's (what the reconciler applies), plus Helm's labels and
    the keep policy, so an uninstall never deletes RepositoryBindings with their CRD."""
    rendered = crds(render(BASE))
    catalog = {crd["metadata"]["name"]: crd for crd in load_crds(cluster="control-plane")}
    assert rendered.keys() == catalog.keys()
    for name, crd in rendered.items():
        meta = crd.pop("metadata")
        assert meta["annotations"] == KEEP, name
        assert meta["labels"]["app.kubernetes.io/component"] == "crds"
        assert meta["labels"]["app.kubernetes.io/instance"] == "klutch"
        assert {**crd, "metadata": {"name": meta["name"]}} == catalog[name]


def test_without_crds_install_none_render_and_the_reconciler_may_create_them() -> None:
    docs = render(BASE, set_values=["crds.install=false"])
    assert crds(docs) == {}
    rule = reconciler_crd_rule(docs)
    assert set(rule["verbs"]) == {"get", "create", "patch"}
    assert set(rule["resourceNames"]) == set(crds(render(BASE)))
    assert reconciler_crd_rule(render(BASE)) == rule  # it applies them at start either way


def test_the_value_sets_cover_both_ways() -> None:
    assert crds(render([VALUE_SETS["no-rbac"]])) == {}
    assert len(crds(render(BASE))) == len(load_crds(cluster="control-plane"))


def test_common_labels_reach_the_crds() -> None:
    docs = render(BASE, set_values=["commonLabels.team=platform"])
    assert {crd["metadata"]["labels"]["team"] for crd in crds(docs).values()} == {"platform"}


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        (["crds.install=yes"], "/crds/install"),
        (["crds.instal=false"], "additional properties 'instal' not allowed"),
        (["crds=null"], "/crds"),
    ],
)
def test_the_schema_refuses_bad_crds_values(settings: list[str], where: str) -> None:
    result = template(BASE, set_values=settings)
    assert result.returncode != 0, f"accepted: {settings}"
    assert where in result.stderr, result.stderr


def test_a_metrics_token_from_two_values_is_refused_naming_both_and_the_fix() -> None:
    """The template would merge them into {file, secretRef}, which the config refuses: the
    render fails first, saying which to keep."""
    settings = [
        "reconciler.metricsToken.secretName=metrics",
        "reconciler.config.metricsToken.env=T",
    ]
    result = template(BASE, set_values=settings)
    assert result.returncode != 0, result.stdout
    for named in ("reconciler.metricsToken.secretName", "reconciler.config.metricsToken"):
        assert named in result.stderr, result.stderr
    assert "set one of them" in result.stderr
    for one in settings:
        assert template(BASE, set_values=[one]).returncode == 0, one


def test_the_charts_home_is_the_projects_homepage() -> None:
    project = tomllib.loads((CHART.parents[1] / "pyproject.toml").read_text())["project"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["home"] == project["urls"]["Homepage"]
