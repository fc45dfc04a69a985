"""The chart's Grafana dashboard and Prometheus alerts, loaded the way their consumers load them:
rendered by helm, every PromQL expression parsed, the rule groups against Prometheus' rule-file
format, the dashboard through Grafana's own dashboard model, and every metric they name checked
against the reconciler's exposition, so renaming a metric fails here."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import promql_parser
import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard

from reconciler.metrics import REGISTRY
from tests.helm import VALUE_SETS, render, template

ENABLED = ["grafanaDashboard.enabled=true", "prometheusRule.enabled=true"]
# Series Prometheus makes itself rather than scraping them from the reconciler.
PROMETHEUS_SERIES = {"up"}
# Prometheus' rule-file format: prometheus/prometheus model/rulefmt/rulefmt.go (RuleGroups,
# RuleGroup, Rule and Rule.Validate: one of alert or record, expr, for as a model.Duration, label
# and annotation names as label names). Unknown fields are refused, as rulefmt.Parse does.
DURATION = r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$"
NAMES = {"type": "object", "propertyNames": {"pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"}}
RULE_FILE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["groups"],
    "properties": {
        "groups": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name", "rules"],
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "interval": {"type": "string", "pattern": DURATION},
                    "limit": {"type": "integer"},
                    "labels": {**NAMES, "additionalProperties": {"type": "string"}},
                    "rules": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["alert", "expr"],  # this file holds alerts only
                            "properties": {
                                "alert": {"type": "string", "pattern": "^[A-Za-z][A-Za-z0-9]*$"},
                                "expr": {"type": "string", "minLength": 1},
                                "for": {"type": "string", "pattern": DURATION},
                                "keep_firing_for": {"type": "string", "pattern": DURATION},
                                "labels": {**NAMES, "additionalProperties": {"type": "string"}},
                                "annotations": {
                                    **NAMES,
                                    "required": ["summary", "description", "runbook"],
                                    "additionalProperties": {"type": "string", "minLength": 1},
                                },
                            },
                        },
                    },
                },
            },
        }
    },
}
# The dashboard panels the issue asks for, by title.
PANELS = {
    "Ready",
    "Not Ready",
    "Suspended",
    "Claims",
    "Refused documents",
    "Pass duration",
    "Fetch duration",
    "Write-back duration",
    "Errors by reason",
    "Status commits",
    "Queue depth",
    "Queue wait",
    "Retries and adds",
    "Binder token time left",
    "CPU",
    "Memory",
}


def exposed_names() -> set[str]:
    """Every series name the reconciler's registry can expose, whether or not it has samples
    now (a labelled metric shows none until a label set is recorded)."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created"),
        "info": ("_info",),
    }
    return {
        family.name + suffix
        for family in REGISTRY.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def selectors(expr: str) -> list[promql_parser.VectorSelector]:
    """The vector selectors of ``expr``; a parse error fails the test with the expression."""
    try:
        parsed = promql_parser.parse(expr)
    except ValueError as error:
        pytest.fail(f"PromQL does not parse: {error}: {expr}")
    found: list[promql_parser.VectorSelector] = []
    promql_parser.walk(
        parsed,
        lambda node: found.append(node) if isinstance(node, promql_parser.VectorSelector) else None,
    )
    return found


def matchers(selector: promql_parser.VectorSelector) -> dict[str, str]:
    return {matcher.name: matcher.value for matcher in selector.matchers.matchers}


def kind(docs: list[dict], name: str) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == name]


@pytest.fixture(scope="module")
def enabled() -> list[dict]:
    return render([VALUE_SETS["default"]], set_values=ENABLED, namespace="monitoring")


@pytest.fixture(scope="module")
def rule_spec(enabled: list[dict]) -> dict[str, Any]:
    [rule] = kind(enabled, "PrometheusRule")
    return rule["spec"]


@pytest.fixture(scope="module")
def dashboard(enabled: list[dict]) -> dict[str, Any]:
    [config_map] = [
        doc
        for doc in kind(enabled, "ConfigMap")
        if doc["metadata"]["labels"]["app.kubernetes.io/component"] == "dashboard"
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    [(name, text)] = config_map["data"].items()
    assert name.endswith(".json")
    return json.loads(text)


def alerts(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in spec["groups"] for rule in group["rules"]]


def test_neither_is_rendered_by_default() -> None:
    docs = render([VALUE_SETS["default"]])
    assert kind(docs, "PrometheusRule") == []
    components = {doc["metadata"]["labels"]["app.kubernetes.io/component"] for doc in docs}
    assert "dashboard" not in components
    # the alerts are the reconciler's: without it, none
    docs = render([VALUE_SETS["default"]], set_values=[*ENABLED, "reconciler.enabled=false"])
    assert kind(docs, "PrometheusRule") == []


def test_the_rules_are_a_valid_prometheus_rule_file(rule_spec: dict[str, Any]) -> None:
    jsonschema.validate(rule_spec, RULE_FILE)
    names = [rule["alert"] for rule in alerts(rule_spec)]
    assert len(names) == len(set(names))
    assert {
        "KlutchGitopsReconcilerDown",
        "KlutchGitopsRepositoryNotReady",
        "KlutchGitopsWriteBackFailing",
        "KlutchGitopsBinderTokenExpiring",
    } <= set(names)
    for rule in alerts(rule_spec):
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]


def test_every_rule_parses_and_selects_this_releases_reconciler(
    enabled: list[dict], rule_spec: dict[str, Any]
) -> None:
    [service] = [
        doc
        for doc in kind(enabled, "Service")
        if doc["metadata"]["labels"]["app.kubernetes.io/component"] == "reconciler"
    ]
    job = service["metadata"]["name"]  # the job of a ServiceMonitor's targets: the Service's name
    for rule in alerts(rule_spec):
        assert "${" not in json.dumps(rule), f"{rule['alert']}: a placeholder is left"
        for selector in selectors(rule["expr"]):
            assert matchers(selector) | {"job": job, "namespace": "monitoring"} == matchers(
                selector
            ), f"{rule['alert']}: {selector.name} is not scoped to the release"


def test_the_not_ready_rule_is_the_issues_and_spares_suspended_repositories(
    rule_spec: dict[str, Any],
) -> None:
    [rule] = [r for r in alerts(rule_spec) if r["alert"] == "KlutchGitopsRepositoryNotReady"]
    assert rule["for"] == "10m"
    [ready, suspended] = selectors(rule["expr"])
    assert ready.name == "klutch_gitops_reconcile_condition"
    assert matchers(ready)["type"] == "Ready"
    assert matchers(ready)["status"] == "True"
    assert suspended.name == "klutch_gitops_suspended"
    assert " unless " in rule["expr"]


def test_the_write_back_rule_reads_the_condition_and_the_failures(
    rule_spec: dict[str, Any],
) -> None:
    [rule] = [r for r in alerts(rule_spec) if r["alert"] == "KlutchGitopsWriteBackFailing"]
    [condition, failures] = selectors(rule["expr"])
    assert condition.name == "klutch_gitops_reconcile_condition"
    assert (matchers(condition)["type"], matchers(condition)["status"]) == ("WrittenBack", "False")
    assert failures.name == "klutch_gitops_write_back_failures_total"


def test_the_binder_token_threshold_is_a_value() -> None:
    docs = render(
        [VALUE_SETS["default"]],
        set_values=[*ENABLED, "prometheusRule.binderTokenExpiryWarningSeconds=3600"],
    )
    [rule] = [
        r
        for r in alerts(kind(docs, "PrometheusRule")[0]["spec"])
        if r["alert"] == "KlutchGitopsBinderTokenExpiring"
    ]
    assert re.search(r"- time\(\) < 3600$", rule["expr"]), rule["expr"]


def test_every_metric_the_rules_and_the_dashboard_use_is_exposed(
    rule_spec: dict[str, Any], dashboard: dict[str, Any]
) -> None:
    exposed = exposed_names() | PROMETHEUS_SERIES
    used = {
        selector.name: rule["alert"]
        for rule in alerts(rule_spec)
        for selector in selectors(rule["expr"])
    }
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for selector in selectors(grafana_free(target["expr"])):
                used[selector.name] = panel["title"]
    unknown = {name: where for name, where in used.items() if name not in exposed}
    assert unknown == {}, "metrics the reconciler does not expose"
    # the panels read the reconciler's own metrics, not only the process collectors
    assert sum(name.startswith("klutch_gitops_") for name in used) >= 10


def grafana_free(expr: str) -> str:
    """``expr`` with Grafana's variables replaced by what Prometheus would receive."""
    return (
        expr.replace("$__rate_interval", "1m").replace("$namespace", ".*").replace("$job", ".*")
    ).replace("$repository", ".*")


def test_the_dashboard_is_a_grafana_dashboard(dashboard: dict[str, Any]) -> None:
    """Grafana's dashboard model (grafana-foundation-sdk, generated from Grafana's schema) reads
    every field: a field it does not know, a misspelt one, is dropped on the way through."""
    assert dashboard["schemaVersion"] >= 36
    register_default_plugins()  # the stat/timeseries options and Prometheus query models
    through = json.loads(json.dumps(Dashboard.from_json(dashboard), cls=JSONEncoder))
    assert unknown_fields(dashboard, through) == []


def unknown_fields(given: Any, read: Any, path: str = "") -> list[str]:
    if isinstance(given, dict):
        return [
            found
            for key, value in given.items()
            for found in (
                unknown_fields(value, read[key], f"{path}/{key}")
                if isinstance(read, dict) and key in read
                else [f"{path}/{key}"]
            )
        ]
    if isinstance(given, list) and isinstance(read, list) and len(given) == len(read):
        return [
            f
            for i, (a, b) in enumerate(zip(given, read, strict=True))
            for f in unknown_fields(a, b, f"{path}/{i}")
        ]
    return [] if given == read else [path]


def test_the_dashboards_panels_queries_and_variables(dashboard: dict[str, Any]) -> None:
    panels = dashboard["panels"]
    assert {panel["title"] for panel in panels} >= PANELS
    assert len({panel["id"] for panel in panels}) == len(panels)
    variables = {variable["name"] for variable in dashboard["templating"]["list"]}
    assert variables == {"datasource", "namespace", "job", "repository"}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["w"] > 0, panel["title"]
        assert grid["h"] > 0, panel["title"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        refs = [target["refId"] for target in panel["targets"]]
        assert refs, panel["title"]
        assert len(set(refs)) == len(refs), panel["title"]
        for target in panel["targets"]:
            used = set(re.findall(r"\$(\w+)", target["expr"])) - {"__rate_interval"}
            assert used <= variables, f"{panel['title']}: undefined {used - variables}"
    assert not overlapping(panels)


def overlapping(panels: list[dict[str, Any]]) -> list[tuple[str, str]]:
    cells: dict[tuple[int, int], str] = {}
    clashes = []
    for panel in panels:
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                if (x, y) in cells:
                    clashes.append((cells[(x, y)], panel["title"]))
                cells[(x, y)] = panel["title"]
    return clashes


def test_the_dashboards_labels_and_annotations_are_values() -> None:
    docs = render(
        [VALUE_SETS["default"]],
        set_values=[
            "grafanaDashboard.enabled=true",
            "grafanaDashboard.labels.team=platform",
            "grafanaDashboard.annotations.grafana_folder=Klutch",
            "prometheusRule.enabled=true",
            "prometheusRule.labels.release=kube-prometheus-stack",
        ],
    )
    [config_map] = [
        doc for doc in kind(docs, "ConfigMap") if doc["metadata"]["name"].endswith("-dashboard")
    ]
    assert config_map["metadata"]["labels"]["team"] == "platform"
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Klutch"}
    [rule] = kind(docs, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        (["grafanaDashboard.enabeld=true"], "grafanaDashboard"),
        (["prometheusRule.enabled=yes"], "/prometheusRule/enabled"),
        (["prometheusRule.binderTokenExpiryWarningSeconds=10"], "binderTokenExpiryWarningSeconds"),
        (["prometheusRule.labels.release=1"], "/prometheusRule/labels/release"),
    ],
)
def test_the_schema_refuses_typos_and_wrong_types(settings: list[str], where: str) -> None:
    result = template([VALUE_SETS["default"]], set_values=settings)
    assert result.returncode != 0, f"accepted: {settings}"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert where in result.stderr, result.stderr
