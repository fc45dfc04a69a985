"""catalog/rbac/app-cluster.yaml: least privilege on the App Cluster, each rule saying why.

What the rules must cover is proven on a real cluster by tests/integration/test_app_cluster_role.py;
these checks keep the file honest between runs: no wildcards, a comment on every rule, the claim
kinds exactly the catalog's exported ones, and the grant asserted as a whole so that widening it
is a deliberate edit of this test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
ROLES = ROOT / "catalog" / "rbac" / "app-cluster.yaml"
NEVER = {"*", "escalate", "bind", "impersonate", "update", "deletecollection"}

pytestmark = pytest.mark.unit


def documents() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(ROLES.read_text())}


def claim_plurals() -> list[str]:
    """The claim kinds the catalog exports (its XRDs' claimNames), as the roles name them."""
    plurals = []
    for path in sorted((ROOT / "catalog" / "xrds").glob("*.yaml")):
        xrd = yaml.safe_load(path.read_text())
        assert xrd["spec"]["group"] == "anynines.com", path
        plurals.append(xrd["spec"]["claimNames"]["plural"])
    return sorted(plurals)


def rules(name: str) -> list[dict[str, Any]]:
    return documents()[name]["rules"]


def test_three_roles_and_nothing_else() -> None:
    kinds = {
        name: (doc["kind"], doc["metadata"].get("namespace")) for name, doc in documents().items()
    }
    assert kinds == {
        "klutch-gitops-app-cluster": ("ClusterRole", None),
        "klutch-gitops-app-namespace": ("ClusterRole", None),
        "klutch-gitops-konnector-check": ("Role", "klutch-bind"),
    }


def test_no_wildcards_and_no_escalating_verbs() -> None:
    for name, doc in documents().items():
        assert "aggregationRule" not in doc, name
        for rule in doc["rules"]:
            for field in ("apiGroups", "resources", "verbs", "resourceNames"):
                assert "*" not in "".join(rule.get(field, [])), f"{name}: {field} {rule}"
            assert not NEVER & set(rule["verbs"]), f"{name}: {rule}"
            assert "nonResourceURLs" not in rule, name


def test_every_rule_says_why() -> None:
    """A comment block right above each rule, naming the module that needs it."""
    lines = ROLES.read_text().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("  - apiGroups:")]
    assert len(starts) == sum(len(doc["rules"]) for doc in documents().values())
    for i in starts:
        comment = []
        j = i - 1
        while j >= 0 and lines[j].startswith("  #"):
            comment.insert(0, lines[j])
            j -= 1
        assert comment, f"line {i + 1}: a rule without a comment above it"
        assert ".py" in " ".join(comment), f"line {i + 1}: the comment names no module"


def test_the_claim_kinds_are_the_catalogs_exported_ones() -> None:
    plurals = claim_plurals()
    claims = [r for name in documents() for r in rules(name) if r["apiGroups"] == ["anynines.com"]]
    assert [sorted(r["resources"]) for r in claims] == [
        plurals,
        plurals,
        [f"{p}/status" for p in plurals],
    ]


def test_the_grant_as_a_whole() -> None:
    """Cluster-wide only what cannot be namespaced; in App namespaces writes but no Secret
    reads beyond the informers' list; in klutch-bind one read."""
    summary = {
        name: [(r["apiGroups"][0], r["resources"][0], r["verbs"]) for r in rules(name)]
        for name in documents()
    }
    assert summary == {
        "klutch-gitops-app-cluster": [
            ("apiextensions.k8s.io", "customresourcedefinitions", ["get", "create", "patch"]),
            ("klutch.anynines.com", "apiservicebindings", ["get", "list", "watch"]),
            ("", "secrets", ["list", "watch"]),
            ("anynines.com", "backups", ["list", "watch"]),
        ],
        "klutch-gitops-app-namespace": [
            ("anynines.com", "backups", ["get", "create", "patch", "delete"]),
            ("anynines.com", "backups/status", ["patch"]),
            ("", "secrets", ["create", "patch", "delete"]),
            ("", "events", ["create", "patch"]),
        ],
        "klutch-gitops-konnector-check": [("", "secrets", ["get"])],
    }
