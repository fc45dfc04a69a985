"""The one conditions helper: transitions, observedGeneration, and comparing without times."""

from __future__ import annotations

from klutch_gitops.kube import conditions
from klutch_gitops.kube.conditions import CROSSPLANE, condition, set_conditions, unchanged

READY = condition("Ready", True, "Synced", "applied")


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    first = set_conditions([], [READY], 1, "t1")
    again = set_conditions(first, [{**READY, "message": "applied again"}], 2, "t2")
    assert again == [{**READY, "message": "applied again", "observedGeneration": 2,
                      "lastTransitionTime": "t1"}]  # fmt: skip


def test_a_new_status_is_a_transition() -> None:
    first = set_conditions([], [READY], 1, "t1")
    failed = set_conditions(first, [condition("Ready", False, "SyncFailed", "boom")], 1, "t2")
    assert failed[0]["lastTransitionTime"] == "t2"
    assert failed[0]["status"] == "False"


def test_crossplane_moves_the_time_on_any_change() -> None:
    first = set_conditions([], [READY], 1, "t1", CROSSPLANE)
    assert set_conditions(first, [READY], 1, "t2", CROSSPLANE) == first
    assert set_conditions(first, [READY], 2, "t2", CROSSPLANE)[0]["lastTransitionTime"] == "t2"


def test_other_types_stay_and_the_list_is_sorted() -> None:
    stalled = condition("Stalled", False, "NotStalled")
    first = set_conditions([], [stalled, READY], 1, "t1")
    assert [c["type"] for c in first] == ["Ready", "Stalled"]
    kept = set_conditions(first, [READY], 1, "t2")
    assert kept == first


def test_no_generation_sets_none() -> None:
    assert "observedGeneration" not in set_conditions([], [READY], None, "t1")[0]


def test_unknown_status() -> None:
    assert condition("Ready", None, "Progressing")["status"] == "Unknown"


def test_unchanged_ignores_times_and_order() -> None:
    old = {
        "claims": 1,
        "conditions": set_conditions([], [READY, condition("A", True, "X")], 1, "t1"),
    }
    new = {
        "claims": 1,
        "conditions": [{**c, "lastTransitionTime": "t9"} for c in old["conditions"]],
    }
    new["conditions"].reverse()
    assert unchanged(old, new)
    assert not unchanged(old, {**new, "claims": 2})
    assert not unchanged(old, {**new, "conditions": new["conditions"][:1]})
    assert unchanged(None, {})


def test_by_type() -> None:
    status = {"conditions": set_conditions([], [READY], 1, "t1")}
    assert conditions.by_type(status)["Ready"]["reason"] == "Synced"
    assert conditions.by_type(None) == {}
