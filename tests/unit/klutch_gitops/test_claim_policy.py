"""The claim-references admission policy: one source, shipped by the chart and the reconciler."""

from __future__ import annotations

from klutch_gitops.policies import POLICY_DIR, RESOURCES, load_policies
from tests.helm import CHART, VALUE_SETS, render

POLICY = "klutch-gitops-claim-references"
STEERING = "klutch-gitops-repositorybinding-steering"  # repositorybinding-steering.yaml


def test_the_charts_policies_are_the_catalogs() -> None:
    """Helm reads only files inside the chart, so policies/ holds copies: kept byte-identical."""
    wanted = {path.name for path in POLICY_DIR.glob("*.yaml")}
    assert {path.name for path in (CHART / "policies").iterdir()} == wanted
    for name in sorted(wanted):
        assert (CHART / "policies" / name).read_bytes() == (POLICY_DIR / name).read_bytes(), (
            f"charts/klutch-gitops/policies/{name} differs from catalog/policies/{name}: "
            f"cp catalog/policies/{name} charts/klutch-gitops/policies/"
        )


def test_policies_come_before_their_bindings() -> None:
    policies = load_policies()
    assert [(p["kind"], p["metadata"]["name"]) for p in policies] == [
        ("ValidatingAdmissionPolicy", POLICY),
        ("ValidatingAdmissionPolicy", STEERING),
        ("ValidatingAdmissionPolicyBinding", POLICY),
        ("ValidatingAdmissionPolicyBinding", STEERING),
    ]
    assert {p["kind"] for p in policies} <= set(RESOURCES)
    for binding in [p for p in policies if p["kind"] == "ValidatingAdmissionPolicyBinding"]:
        assert binding["spec"]["policyName"] == binding["metadata"]["name"]
        assert binding["spec"]["validationActions"] == ["Deny"]


def test_the_chart_renders_the_policy_and_lets_the_reconciler_apply_it_by_name() -> None:
    docs = render([VALUE_SETS["default"]])
    rendered = [doc for doc in docs if doc["kind"] in RESOURCES]
    for doc in rendered:  # the chart's labels on the same objects the reconciler applies
        assert doc["metadata"].pop("labels")["app.kubernetes.io/component"] == "reconciler"
    assert sorted(rendered, key=lambda d: d["kind"]) == load_policies()
    (role,) = [
        doc
        for doc in docs
        if doc["kind"] == "ClusterRole"
        and doc["metadata"]["labels"]["app.kubernetes.io/component"] == "reconciler"
    ]
    (rule,) = [r for r in role["rules"] if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    assert rule == {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingadmissionpolicies", "validatingadmissionpolicybindings"],
        "verbs": ["get", "create", "patch"],
        "resourceNames": [POLICY, STEERING],
    }
