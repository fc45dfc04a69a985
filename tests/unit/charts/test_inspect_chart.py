"""The chart's aggregated RepositoryBinding roles and the tenant's steering policy, as rendered."""

from __future__ import annotations

from klutch_gitops.consumer import CONSUMER_RULES
from klutch_gitops.policies import load_policies
from tests.helm import VALUE_SETS, render

GROUP = "gitops.klutch.anynines.com"
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


def roles() -> dict[str, dict]:
    docs = render([VALUE_SETS["default"]])
    return {
        d["metadata"]["name"]: d
        for d in docs
        if d["kind"] == "ClusterRole" and "repositorybindings" in d["metadata"]["name"]
    }


def test_view_and_edit_aggregate_into_the_default_user_facing_roles() -> None:
    # Kubernetes' view, edit and admin select ClusterRoles by these labels; edit and admin do not
    # inherit view's aggregation, so view carries all three (docs: reference/access-authn-authz/
    # rbac/#aggregated-clusterroles; plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go).
    found = roles()
    assert set(found) == {
        "klutch-gitops-repositorybindings-view",
        "klutch-gitops-repositorybindings-edit",
    }
    view, edit = (found[f"klutch-gitops-repositorybindings-{n}"] for n in ("view", "edit"))
    labels = {
        k.removeprefix(AGGREGATE) for k, v in view["metadata"]["labels"].items() if v == "true"
    }
    assert labels == {"view", "edit", "admin"}
    labels = {
        k.removeprefix(AGGREGATE) for k, v in edit["metadata"]["labels"].items() if v == "true"
    }
    assert labels == {"edit", "admin"}
    assert view["rules"] == [
        {
            "apiGroups": [GROUP],
            "resources": ["repositorybindings"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert edit["rules"] == [
        {"apiGroups": [GROUP], "resources": ["repositorybindings"], "verbs": ["patch", "update"]}
    ]


def test_the_binder_may_read_and_patch_but_not_create_or_delete_its_bindings() -> None:
    (rule,) = [r for r in CONSUMER_RULES if r["apiGroups"] == [GROUP]]
    assert rule == {
        "apiGroups": [GROUP],
        "resources": ["repositorybindings"],
        "verbs": ["get", "list", "watch", "patch"],
    }


def test_the_bind_api_holds_what_the_binder_role_grants_on_bindings() -> None:
    """RBAC lets only a holder grant a verb (no `escalate` here)."""
    (bind_api,) = [
        d
        for d in render([VALUE_SETS["default"]])
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("bind-api")
    ]
    held = {v for r in bind_api["rules"] if r["apiGroups"] == [GROUP] for v in r["verbs"]}
    assert {"get", "list", "watch", "patch"} <= held


def test_the_steering_policy_is_shipped_and_matches_only_the_binder() -> None:
    policies = {(p["kind"], p["metadata"]["name"]): p for p in load_policies()}
    policy = policies[("ValidatingAdmissionPolicy", "klutch-gitops-repositorybinding-steering")]
    (rule,) = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["repositorybindings"], ["UPDATE"])
    (condition,) = policy["spec"]["matchConditions"]
    assert "':klutch-binder'" in condition["expression"]
    binding = policies[
        ("ValidatingAdmissionPolicyBinding", "klutch-gitops-repositorybinding-steering")
    ]
    assert binding["spec"]["validationActions"] == ["Deny"]
