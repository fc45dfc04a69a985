"""The chart's dashboard ConfigMap and PrometheusRule on a real kube-apiserver: a server-side dry
run with strict field validation, against a PrometheusRule CRD whose schema is the
prometheus-operator's."""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.crds import install_crds
from klutch_gitops.kube.resources import CRDS
from tests.conftest import TwinNamespace
from tests.helm import VALUE_SETS, render

# prometheus-operator's Duration (pkg/apis/monitoring/v1/types.go) and its PrometheusRule types
# (pkg/apis/monitoring/v1/prometheusrule_types.go: RuleGroup name, interval, rules, limit; Rule
# record, alert, expr, for, labels, annotations), as a structural schema: no field beyond them.
DURATION = {
    "type": "string",
    "pattern": "^(0|"
    + "".join(f"(([0-9]+){unit})?" for unit in ("y", "w", "d", "h", "m", "s", "ms"))
    + ")$",
}
STRINGS = {"type": "object", "additionalProperties": {"type": "string"}}
RULE = {
    "type": "object",
    "required": ["expr"],
    "properties": {
        "record": {"type": "string"},
        "alert": {"type": "string"},
        "expr": {"x-kubernetes-int-or-string": True},
        "for": DURATION,
        "keep_firing_for": DURATION,
        "labels": STRINGS,
        "annotations": STRINGS,
    },
}
GROUP = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "interval": DURATION,
        "limit": {"type": "integer"},
        "rules": {"type": "array", "items": RULE},
    },
}
PROMETHEUS_RULE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "prometheusrules.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {
            "kind": "PrometheusRule",
            "listKind": "PrometheusRuleList",
            "plural": "prometheusrules",
            "singular": "prometheusrule",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "required": ["spec"],
                        "properties": {
                            "spec": {
                                "type": "object",
                                "properties": {"groups": {"type": "array", "items": GROUP}},
                            }
                        },
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def rule_crd(clusters: dict[str, client.ApiClient]) -> Iterator[None]:
    api = clusters["control-plane"]
    install_crds(api, [PROMETHEUS_RULE_CRD])
    yield
    Kube(api).delete(CRDS, None, PROMETHEUS_RULE_CRD["metadata"]["name"])


def dry_run(stack: StackInfo, docs: list[dict]) -> subprocess.CompletedProcess[str]:
    """kubectl's server-side apply, dry run; kubectl asks for strict field validation."""
    program = binaries.require("kubectl")["kubectl"]
    return subprocess.run(
        [
            str(program),
            "--kubeconfig",
            stack.clusters["control-plane"].kubeconfig,
            *("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", "-"),
        ],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_dashboard_and_the_alerts_pass_a_server_side_dry_run(
    namespace: TwinNamespace, stack: StackInfo, rule_crd: None
) -> None:
    docs = render(
        [VALUE_SETS["default"]],
        set_values=["grafanaDashboard.enabled=true", "prometheusRule.enabled=true"],
        namespace=namespace.name,
    )
    monitoring = [
        doc
        for doc in docs
        if doc["kind"] == "PrometheusRule"
        or doc["metadata"]["labels"]["app.kubernetes.io/component"] == "dashboard"
    ]
    assert sorted(doc["kind"] for doc in monitoring) == ["ConfigMap", "PrometheusRule"]
    result = dry_run(stack, monitoring)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("(server dry run)") == 2, result.stdout

    # The check is live: a rule the operator's schema refuses is refused.
    [rule] = [doc for doc in monitoring if doc["kind"] == "PrometheusRule"]
    broken = copy.deepcopy(rule)
    broken["spec"]["groups"][0]["rules"][0]["for"] = "five minutes"
    result = dry_run(stack, [broken])
    assert result.returncode != 0
    assert "spec.groups[0].rules[0].for" in result.stderr, result.stderr
