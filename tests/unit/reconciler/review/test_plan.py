"""Pull-request plans: the diff, what is destructive, the order, what fails, and the comment."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconciler.manifests import Claim, Identity, Location, Rejection
from reconciler.review.plan import (
    ABSENT,
    Action,
    BindingPlan,
    Change,
    Check,
    FieldChange,
    Outcome,
    Plan,
    classify,
    compare,
    deletion_check,
    diff,
    field_path,
    order,
    with_checks,
)
from reconciler.review.plan_render import (
    FOLD_LINES,
    MAX_COMMENT,
    diff_lines,
    plan_dict,
    render_json,
    render_markdown,
)
from reconciler.sync import objects
from reconciler.sync.desired import DesiredState

NS = "team"


def body(
    kind: str = "PostgresqlInstance", name: str = "db", spec: dict | None = None, **meta: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "anynines.com/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NS, **meta},
        "spec": spec
        if spec is not None
        else {"service": "a9s-postgresql13", "plan": "postgresql-single-small"},
    }


def claim(obj: dict[str, Any], file: str = "claims/db.yaml", document: int = 0) -> Claim:
    return Claim(Identity.of(obj), obj["apiVersion"], obj, Location(file, document, 1))


def state(*claims: Claim, rejections: tuple[Rejection, ...] = ()) -> DesiredState:
    return DesiredState(tuple(claims), rejections)


def ident(kind: str = "PostgresqlInstance", name: str = "db") -> Identity:
    return Identity("anynines.com", kind, NS, name)


# -- diff -------------------------------------------------------------------------------------


def test_diff_names_each_changed_leaf_and_ignores_status_and_server_fields() -> None:
    old = body(labels={"team": "a"}, uid="1", resourceVersion="5")
    old["status"] = {"conditions": [{"type": "Ready"}]}
    new = body(
        spec={"service": "a9s-postgresql13", "plan": "postgresql-single-big", "parameters": {}},
        labels={"team": "b", "app.kubernetes.io/name": "orders"},
        uid="2",
    )
    assert [(f.path, f.op, f.old, f.new) for f in diff(old, new)] == [
        ("metadata.labels.team", "change", "a", "b"),
        ('metadata.labels["app.kubernetes.io/name"]', "add", ABSENT, "orders"),
        ("spec.plan", "change", "postgresql-single-small", "postgresql-single-big"),
    ]


def test_diff_of_lists_goes_by_index_and_types_count() -> None:
    old = body(spec={"hosts": ["a", "b", "c"], "limit": 1})
    new = body(spec={"hosts": ["a", "x"], "limit": True})
    assert [(f.path, f.op) for f in diff(old, new)] == [
        ("spec.hosts[1]", "change"),
        ("spec.limit", "change"),
        ("spec.hosts[2]", "remove"),
    ]


def test_diff_of_a_created_or_deleted_object_lists_every_field() -> None:
    created = diff(None, body(annotations={"a": "1"}))
    assert [f.path for f in created] == ["metadata.annotations.a", "spec.service", "spec.plan"]
    assert all(f.op == "add" for f in created)
    assert all(f.op == "remove" for f in diff(body(), None))


def test_diff_shows_a_changed_api_version() -> None:
    new = {**body(), "apiVersion": "anynines.com/v2"}
    assert [(f.path, f.old, f.new) for f in diff(body(), new)] == [
        ("apiVersion", "anynines.com/v1", "anynines.com/v2")
    ]


def test_field_paths_quote_keys_that_are_not_plain_names() -> None:
    assert field_path(["metadata", "annotations", 'a"b.c']) == 'metadata.annotations["a\\"b.c"]'
    assert field_path(["spec", "items", 2, "name"]) == "spec.items[2].name"


# -- classification and order ----------------------------------------------------------------


def fields(*paths: str) -> list[FieldChange]:
    return [FieldChange(tuple(p.split(".")), "a", "b") for p in paths]


@pytest.mark.parametrize(
    ("action", "kind", "changed", "rank", "reason"),
    [
        (Action.DELETE, "PostgresqlInstance", [], 0, "deletes the data service and its data"),
        (Action.DELETE, "Backup", [], 0, "deletes the backup"),
        (Action.DELETE, "ServiceBinding", [], 0, "revokes the binding's credentials"),
        (Action.DELETE, "Widget", [], 0, "deletes what the Widget made"),
        (Action.DELETE, "Restore", [], 5, None),
        (Action.CREATE, "Restore", [], 1, "overwrites the instance's data with the backup"),
        (Action.CHANGE, "Restore", ["spec.backupRef"], 1, "overwrites"),
        (Action.CHANGE, "PostgresqlInstance", ["spec.plan"], 2, "restarts the service (spec.plan)"),
        (Action.CHANGE, "KeyvalueInstance", ["spec.parameters.maxmemory"], 2, "spec.parameters"),
        (Action.CHANGE, "PostgresqlInstance", ["spec.compositionRef.name"], 2, "restarts"),
        (Action.CHANGE, "PostgresqlInstance", ["spec.writeConnectionSecretToRef.name"], 4, None),
        (Action.CHANGE, "PostgresqlInstance", ["metadata.labels.team"], 4, None),
        (Action.CHANGE, "ServiceBinding", ["spec.instanceRef"], 2, "replaces the credentials"),
        (Action.CHANGE, "ServiceBinding", ["metadata.labels.team"], 4, None),
        (Action.CREATE, "PostgresqlInstance", ["spec.plan"], 3, None),
    ],
)
def test_classification(
    action: Action, kind: str, changed: list[str], rank: int, reason: str | None
) -> None:
    found_rank, found_reason = classify(action, kind, fields(*changed))
    assert found_rank == rank
    if reason is None:
        assert found_reason is None
    else:
        assert reason in (found_reason or "")


def test_destructive_changes_come_first() -> None:
    def change(action: Action, kind: str, name: str, *changed: str) -> Change:
        rank, why = classify(action, kind, fields(*changed))
        return Change(action, ident(kind, name), "anynines.com/v1", "f", (), why, rank)

    planned = order(
        [
            change(Action.CHANGE, "PostgresqlInstance", "label-only", "metadata.labels.x"),
            change(Action.CREATE, "ServiceBinding", "new"),
            change(Action.CHANGE, "PostgresqlInstance", "bigger", "spec.plan"),
            change(Action.DELETE, "Restore", "old-restore"),
            change(Action.CREATE, "Restore", "restore"),
            change(Action.DELETE, "PostgresqlInstance", "gone"),
        ]
    )
    assert [c.identity.name for c in planned] == [
        "gone",
        "restore",
        "bigger",
        "new",
        "label-only",
        "old-restore",
    ]
    assert [c.destructive is not None for c in planned] == [True] * 3 + [False] * 3


# -- comparing two desired states -------------------------------------------------------------


def test_compare_finds_creations_changes_and_deletions() -> None:
    kept, changed, gone = body(name="kept"), body(name="changed"), body(name="gone")
    moved = body(name="moved")
    bigger = body(name="changed", spec={**changed["spec"], "plan": "postgresql-single-big"})
    binding = body("ServiceBinding", "app", {"instanceRef": "kept"})
    result = compare(
        "team",
        "claims",
        state(claim(kept), claim(changed), claim(gone), claim(moved, "claims/a.yaml")),
        state(claim(kept), claim(bigger), claim(binding), claim(moved, "claims/b.yaml")),
    )
    assert [(c.action, c.identity.name) for c in result.changes] == [
        (Action.DELETE, "gone"),
        (Action.CHANGE, "changed"),
        (Action.CREATE, "app"),
    ]
    assert result.changes[0].file == "claims/db.yaml"
    assert result.failures() == []


def test_refused_documents_fail_only_when_the_merge_brings_them() -> None:
    old_problem = Rejection("claims/old.yaml", "bad", "fix it", 0, "spec.plan", ident(name="o"))
    shifted = Rejection("claims/old.yaml", "bad", "fix it", 3, "spec.plan", ident(name="o"))
    new_problem = Rejection("claims/new.yaml", "unknown field spec.x", "remove it", 0, "spec.x")
    result = compare(
        "team",
        "claims",
        state(rejections=(old_problem,)),
        state(rejections=(shifted, new_problem)),
    )
    assert result.refused == (new_problem,)
    assert result.still_refused == (shifted,)
    (failure,) = result.failures()
    assert failure.subject == "claims/new.yaml (document 1)"
    assert failure.message == "spec.x: unknown field spec.x"


def test_a_refused_document_holds_the_claim_it_names_and_a_broken_file_holds_its_claims() -> None:
    named, other = body(name="named"), body(name="other")
    typo = Rejection("claims/db.yaml", "bad plan", "fix", 0, "spec.plan", Identity.of(named))
    broken = Rejection("claims/other.yaml", "not YAML", "fix")
    result = compare(
        "team",
        "claims",
        state(claim(named), claim(other, "claims/other.yaml")),
        state(rejections=(typo, broken)),
    )
    assert result.changes == ()
    assert [(h.identity.name, h.file) for h in result.held] == [
        ("named", "claims/db.yaml"),
        ("other", "claims/other.yaml"),
    ]
    assert len(result.failures()) == 2


def test_deletion_protection_in_git_or_on_the_live_claim_fails_the_deletion() -> None:
    protected = {objects.DELETION_PROTECTION: "true"}
    assert deletion_check(body(), None).outcome is Outcome.PASSED
    in_git = deletion_check(body(annotations=protected), None)
    assert in_git.outcome is Outcome.FAILED
    assert "in Git" in in_git.message
    live = deletion_check(body(), body(annotations=protected))
    assert "on the live App claim" in live.message
    assert deletion_check(
        body(), body(annotations={objects.DELETION_PROTECTION: "no"})
    ).outcome is (Outcome.PASSED)


def test_a_failed_check_fails_the_plan_and_names_the_change() -> None:
    binding = compare("team", "claims", state(claim(body())), state())
    failed = with_checks(
        binding,
        {ident(): [Check("dry-run", Outcome.FAILED, "Transition from bigger to smaller")]},
    )
    plan = Plan("b" * 40, "h" * 40, "t" * 40, (failed,))
    assert plan.exit_code == 1
    (failure,) = plan.failures()
    assert failure.subject == "delete PostgresqlInstance.anynines.com team/db (claims/db.yaml)"
    assert "Control Plane accepts" in failure.fix
    skipped = with_checks(binding, {ident(): [Check("dry-run", Outcome.SKIPPED, "no namespace")]})
    assert Plan("b", "h", "t", (skipped,)).exit_code == 0


# -- rendering --------------------------------------------------------------------------------


def make_plan(*bindings: BindingPlan) -> Plan:
    return Plan("a" * 40, "b" * 40, "c" * 40, bindings, base_ref="main", head_ref="feature")


def test_markdown_lists_failures_first_and_folds_long_diffs() -> None:
    big = body(name="big", spec={f"key{i}": i for i in range(FOLD_LINES + 5)})
    small = body(name="small", labels={"team": "a"})
    binding = compare(
        "team",
        "claims",
        state(claim(small)),
        state(claim(body(name="small", labels={"team": "b"})), claim(big)),
    )
    binding = with_checks(
        binding, {ident(name="big"): [Check("dry-run", Outcome.FAILED, "refused <b>")]}
    )
    text = render_markdown(make_plan(binding))
    assert text.startswith("## klutch-gitops plan: ❌ 1 failure\n")
    assert "1 to create, 1 to change" in text
    assert text.index("### ❌ Failures") < text.index("### team")
    assert "refused &lt;b&gt;" in text  # server messages cannot inject HTML
    small_part = text[text.index("team/small") :]
    assert '- metadata.labels.team: "a"\n+ metadata.labels.team: "b"' in small_part
    assert "<details>" not in small_part  # short diffs stay open
    big_part = text[text.index("team/big") : text.index("team/small")]
    assert "<details><summary>diff: 15 line(s)</summary>" in big_part


def test_markdown_of_a_clean_plan() -> None:
    text = render_markdown(make_plan(compare("team", "claims", state(), state())))
    assert text.startswith("## klutch-gitops plan: ✅ clean\n")
    assert "no changes to claims" in text
    assert "No claims change." in text


def test_a_huge_diff_still_fits_one_comment() -> None:
    huge = body(spec={f"field{i}": "x" * 200 for i in range(5_000)})
    binding = compare("team", "claims", state(), state(claim(huge)))
    plan = make_plan(binding)
    text = render_markdown(plan)
    assert len(text) <= MAX_COMMENT
    assert "create" in text
    assert "`PostgresqlInstance.anynines.com team/db`" in text
    assert "+ spec.field0: " in text  # the diff is shortened, not dropped
    assert "more line(s): see `-o json`" in text
    assert len(json.loads(render_json(plan))["bindings"][0]["changes"][0]["fields"]) == 5_000


def test_too_many_changes_are_cut_with_a_note_and_failures_stay() -> None:
    many = [claim(body(name=f"db-{i:04}", spec={"plan": "p" * 500})) for i in range(400)]
    refused = Rejection("claims/bad.yaml", "unknown field spec.x", "remove it", 0, "spec.x")
    binding = compare("team", "claims", state(), state(*many, rejections=(refused,)))
    text = render_markdown(make_plan(binding))
    assert len(text) <= MAX_COMMENT
    assert "unknown field spec.x" in text
    assert "**Truncated**" in text
    assert "change(s) not shown" in text
    assert "klutch-gitops plan -o json" in text


def test_a_smaller_limit_is_respected() -> None:
    many = [claim(body(name=f"db-{i}")) for i in range(50)]
    text = render_markdown(make_plan(compare("team", "claims", state(), state(*many))), 3_000)
    assert len(text) <= 3_000
    assert "**Truncated**" in text


def test_json_has_everything_for_machines() -> None:
    binding = compare(
        "team",
        "claims",
        state(claim(body(name="gone"))),
        state(claim(body("ServiceBinding", "app", {"instanceRef": "x"}, labels={"a": "b"}))),
    )
    data = plan_dict(make_plan(binding))
    assert data["result"] == "clean"
    assert data["counts"] == {
        "create": 1,
        "change": 0,
        "delete": 1,
        "destructive": 1,
        "failures": 0,
    }
    gone, app = data["bindings"][0]["changes"]
    assert gone["action"] == "delete"
    assert gone["destructive"] == "deletes the data service and its data"
    assert app["kind"] == "ServiceBinding"
    assert {"path": "metadata.labels.a", "op": "add", "new": "b"} in app["fields"]
    assert "old" not in app["fields"][0]


def test_diff_lines_show_values_as_json_and_cut_long_ones() -> None:
    lines = diff_lines([FieldChange(("spec", "note"), "a\nb", "x" * 1_000)])
    assert lines[0] == '- spec.note: "a\\nb"'
    assert lines[1].endswith("…")
    assert len(lines[1]) < 400
