"""Which OIDC groups may bind which template."""

from __future__ import annotations

from klutch_gitops.authz import ALLOWED_GROUPS_ANNOTATION, allowed_groups, may_bind


def template(groups: str | None = None) -> dict:
    annotations = {ALLOWED_GROUPS_ANNOTATION: groups} if groups is not None else {}
    return {"metadata": {"name": "postgresqlinstances", "annotations": annotations}}


def test_annotation_names_the_groups() -> None:
    assert allowed_groups(template(" team-a, dbas ,"), ["everyone"]) == ("team-a", "dbas")
    decision = may_bind(template("team-a,dbas"), "pg", ["team-a"], [])
    assert decision.allowed


def test_default_applies_without_annotation() -> None:
    assert allowed_groups(template(), ["klutch-developers"]) == ("klutch-developers",)
    assert may_bind(template(), "pg", ["klutch-developers"], ["klutch-developers"]).allowed
    assert not may_bind(template(), "pg", ["team-b"], ["klutch-developers"]).allowed


def test_star_admits_every_authenticated_caller() -> None:
    assert may_bind(template("*"), "pg", [], []).allowed
    assert may_bind(template(), "pg", [], ["*"]).allowed


def test_refusals_say_why() -> None:
    refused = may_bind(template("dbas"), "postgresqlinstances.anynines.com", ["team-a"], ["*"])
    assert not refused.allowed
    assert "only members of dbas" in refused.reason
    assert "your groups: team-a" in refused.reason
    nobody = may_bind(template(), "pg", ["team-a"], [])
    assert not nobody.allowed
    assert "nobody may bind it" in nobody.reason
    # an empty annotation is an explicit "nobody", not a fallback to the default
    assert not may_bind(template(""), "pg", ["team-a"], ["*"]).allowed
