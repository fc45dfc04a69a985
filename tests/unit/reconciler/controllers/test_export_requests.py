"""The export request controller's pure decisions: which requests it answers, and how."""

from __future__ import annotations

from typing import Any

from klutch_gitops.apis import BIND_GROUPS_ANNOTATION, IDENTITY_ANNOTATION
from klutch_gitops.authz import ALLOWED_GROUPS_ANNOTATION
from klutch_gitops.consumer import FIELD_MANAGER, bind_groups, recorded_groups
from reconciler.controllers.export_requests import decide, unanswered

CONSUMER = "cluster-abc"
POSTGRES = "postgresqlinstances.anynines.com"


def namespace(groups: list[str] | None, default: list[str] = ()) -> dict[str, Any]:
    annotations = {IDENTITY_ANNOTATION: "sub#app-1"}
    if groups is not None:
        annotations[BIND_GROUPS_ANNOTATION] = bind_groups(groups, default)
    return {"metadata": {"name": CONSUMER, "annotations": annotations}}


def request(*apis: str, **metadata: Any) -> dict[str, Any]:
    resources = [{"group": api.split(".", 1)[1], "resource": api.split(".", 1)[0]} for api in apis]
    return {
        "metadata": {"name": f"{apis[0]}-x1", "namespace": CONSUMER, **metadata},
        "spec": {"resources": resources},
    }


def template(groups: str | None) -> dict[str, Any]:
    annotations = {ALLOWED_GROUPS_ANNOTATION: groups} if groups is not None else {}
    return {
        "metadata": {"name": "t", "annotations": annotations},
        "spec": {
            "APIServiceSelector": {"group": "anynines.com", "resource": "postgresqlinstances"}
        },
    }


CRD = {
    "metadata": {"name": POSTGRES},
    "spec": {
        "group": "anynines.com",
        "names": {"plural": "postgresqlinstances", "kind": "PostgresqlInstance"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}


def test_the_bind_apis_own_and_finished_requests_are_left_alone() -> None:
    assert unanswered(request(POSTGRES))
    assert not unanswered(request(POSTGRES, managedFields=[{"manager": FIELD_MANAGER}]))
    assert not unanswered({**request(POSTGRES), "status": {"phase": "Failed"}})
    assert not unanswered({**request(POSTGRES), "status": {"phase": "Succeeded"}})
    assert unanswered({**request(POSTGRES), "status": {"phase": "Pending"}})


def test_an_allowed_api_is_exported() -> None:
    problem, exports = decide(
        request(POSTGRES), namespace(["team-a"]), {POSTGRES: template("team-a")}, {POSTGRES: CRD}
    )
    assert problem is None
    [export] = exports
    assert (export["metadata"]["name"], export["metadata"]["namespace"]) == (POSTGRES, CONSUMER)


def test_the_recorded_default_applies_to_a_template_without_groups() -> None:
    allowed = namespace(["x"], default=["x"])
    assert (
        decide(request(POSTGRES), allowed, {POSTGRES: template(None)}, {POSTGRES: CRD})[0] is None
    )
    refused = decide(request(POSTGRES), namespace(["x"]), {POSTGRES: template(None)}, {})[0]
    assert "nobody may bind it" in refused


def test_refusals_name_the_reason_and_export_nothing() -> None:
    templates = {POSTGRES: template("dbas")}
    problem, exports = decide(request(POSTGRES), namespace(["team-a"]), templates, {POSTGRES: CRD})
    assert exports == []
    assert "only members of dbas may bind it; your groups: team-a" in problem

    problem, _ = decide(request("widgets.example.com"), namespace(["team-a"]), templates, {})
    assert "widgets.example.com: no APIServiceExportTemplate offers it; offered: " + POSTGRES in (
        problem
    )

    problem, _ = decide(request(POSTGRES), namespace(["team-a"]), {POSTGRES: template("*")}, {})
    assert "does not exist on the Control Plane" in problem

    # One refused API fails the whole request: nothing of it is exported.
    both = request(POSTGRES, "widgets.example.com")
    problem, exports = decide(
        both, namespace(["team-a"]), {POSTGRES: template("*")}, {POSTGRES: CRD}
    )
    assert problem
    assert exports == []


def test_without_recorded_groups_or_a_consumer_namespace_nothing_is_authorized() -> None:
    templates = {POSTGRES: template("*")}
    problem, _ = decide(request(POSTGRES), namespace(None), templates, {POSTGRES: CRD})
    assert "bind once more through the browser flow" in problem
    problem, _ = decide(request(POSTGRES), {"metadata": {"name": CONSUMER}}, templates, {})
    assert "is not a consumer namespace" in problem
    assert decide(request(POSTGRES), None, templates, {})[0]


def test_recorded_groups_refuse_a_malformed_annotation() -> None:
    def annotated(value: str) -> dict[str, Any]:
        return {"metadata": {"annotations": {BIND_GROUPS_ANNOTATION: value}}}

    assert recorded_groups(annotated(bind_groups(["b", "a", "a"], ["d"]))) == (["a", "b"], ["d"])
    for value in ("", "not json", "[]", '{"groups": "a", "defaultAllowedGroups": []}', "{}"):
        assert recorded_groups(annotated(value)) is None
    assert recorded_groups(None) is None
