"""The pure parts of a safe unbind: what the plan holds, when the bind API refuses, what the CLI
lists and asks, and how it waits."""

from __future__ import annotations

from typing import Any

import pytest

from bind_api import unbinding
from bind_api.unbinding import PlannedClaim, UnbindPlan
from klutch_gitops.bind import unbind
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Resource


def export(plural: str, versions: list[dict[str, Any]], group: str = "anynines.com") -> dict:
    kind = plural.removesuffix("s").capitalize()
    return {
        "spec": {"group": group, "names": {"plural": plural, "kind": kind}, "versions": versions}
    }


def test_claim_kinds_come_from_the_exports_at_their_storage_version() -> None:
    v1, v2 = {"name": "v1", "served": True}, {"name": "v2", "served": True, "storage": True}
    resources = unbinding.claim_resources(
        [
            export("postgresqlinstances", [v1, v2]),
            export("backups", [v1]),
            export("broken", []),  # no version: nothing to list
            export("postgresqlinstances", [{"name": "v2", "storage": True}]),  # twice: once
        ]
    )
    assert [(r.plural, r.version) for r in resources] == [
        ("backups", "v1"),
        ("postgresqlinstances", "v2"),
    ]
    assert [unbinding.is_database(r) for r in resources] == [False, True]


def test_a_claim_is_protected_only_by_the_annotation_true() -> None:
    resource = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")

    def claim(value: str | None) -> PlannedClaim:
        annotations = {} if value is None else {unbinding.DELETION_PROTECTION: value}
        meta = {"name": "orders", "namespace": "c-shop", "annotations": annotations}
        return unbinding.planned_claim(resource, {"kind": "PostgresqlInstance", "metadata": meta})

    assert claim("true").protected
    assert not claim("false").protected
    assert not claim(None).protected
    assert claim(None).database
    assert claim(None).ref == "PostgresqlInstance c-shop/orders"


def plan_of(protected: int, plain: int = 1) -> UnbindPlan:
    claims = [
        PlannedClaim("PostgresqlInstance", "c-shop", f"p{i}", True, True) for i in range(protected)
    ] + [PlannedClaim("Backup", "c-shop", f"b{i}", False, False) for i in range(plain)]
    return UnbindPlan("c", ["c", "c-shop"], claims)


def test_the_bind_api_refuses_protected_claims_naming_them_and_the_fix() -> None:
    assert unbinding.protection_refusal(plan_of(0)) is None
    refusal = unbinding.protection_refusal(plan_of(2))
    assert refusal is not None
    assert refusal.status == 409
    assert "PostgresqlInstance c-shop/p0, PostgresqlInstance c-shop/p1" in refusal.message
    assert "Backup" not in refusal.message
    assert "force=true" in refusal.fix
    many = unbinding.protection_refusal(plan_of(7))
    assert many is not None
    assert "p4" in many.message
    assert "p5" not in many.message
    assert many.message.endswith("and 2 more")


def test_the_listing_names_namespaces_claims_databases_and_protection() -> None:
    lines = unbind.plan_lines(plan_of(1).view())
    assert lines == [
        "unbinding c deletes on the Control Plane:",
        "  namespace c (consumer namespace)",
        "  namespace c-shop (mapped namespace)",
        "  PostgresqlInstance c-shop/p0 [database, deletion-protected]",
        "  Backup c-shop/b0",
        "2 claim(s), 1 database(s), 1 deletion-protected",
    ]


def test_without_a_terminal_only_yes_goes_on() -> None:
    view = plan_of(0).view()
    with pytest.raises(KlutchError) as refused:
        unbind.confirm(yes=False, force=False, plan=view, interactive=False)
    assert "pass --yes" in refused.value.message
    assert "nothing was deleted" in refused.value.message
    assert refused.value.fix == ""  # one line
    unbind.confirm(yes=True, force=False, plan=view, interactive=False)


def test_protected_claims_without_force_are_refused_before_asking() -> None:
    view = plan_of(1).view()
    with pytest.raises(KlutchError, match="deletion-protected") as refused:
        unbind.confirm(yes=False, force=False, plan=view, interactive=True)
    assert "--force" in refused.value.fix
    # with --yes the bind API decides (and refuses): the CLI does not pre-empt it
    unbind.confirm(yes=True, force=False, plan=view, interactive=False)


class FakeApi:
    """The bind API's answers to the polls of one unbind: a plan each, then None (gone)."""

    def __init__(self, answers: list[dict | None]) -> None:
        self.answers = answers

    def unbind_plan(self, _consumer: str) -> dict | None:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def test_waiting_prints_each_change_and_ends_when_clean(capsys: pytest.CaptureFixture) -> None:
    both = UnbindPlan("c", ["c", "c-shop"], [], terminating=True).view()
    one = UnbindPlan("c", ["c"], [], terminating=True).view()
    clock = iter(range(100))
    left = unbind.wait_until_gone(
        FakeApi([both, both, one, None]),  # type: ignore[arg-type]
        "c",
        timeout=50,
        clock=lambda: next(clock),
        sleep=lambda _s: None,
    )
    assert left is None
    err = capsys.readouterr().err
    assert err.count("remaining: 2 namespace(s) (c, c-shop), 0 claim(s)") == 1
    assert err.count("remaining: 1 namespace(s) (c), 0 claim(s)") == 1


def test_waiting_gives_up_at_the_timeout_with_what_remains() -> None:
    stuck = UnbindPlan("c", ["c", "c-shop"], [], terminating=True).view()
    clock = iter(range(100))
    left = unbind.wait_until_gone(
        FakeApi([stuck]),  # type: ignore[arg-type]
        "c",
        timeout=3,
        clock=lambda: next(clock),
        sleep=lambda _s: None,
    )
    assert left == stuck
    assert unbind.remaining_summary(left) == "remaining: 2 namespace(s) (c, c-shop), 0 claim(s)"
    assert unbind.remaining_summary(None) == "nothing remains"


def test_claims_the_bind_api_may_not_list_are_refused_unchecked() -> None:
    unchecked = UnbindPlan("c", ["c", "c-shop"], [], unlisted=["postgresqlinstances.anynines.com"])
    refusal = unbinding.protection_refusal(unchecked)
    assert refusal is not None
    assert refusal.status == 409
    assert "may not list postgresqlinstances.anynines.com" in refusal.message
    assert "--force" in refusal.fix
    assert (
        "  postgresqlinstances.anynines.com in those namespaces (the bind API may not list them)"
        in (unbind.plan_lines(unchecked.view()))
    )
