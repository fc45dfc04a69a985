"""A claim's App status as one pure function of its inputs (reconciler/sync/app_status.py):
the Control Plane's conditions kept, ours set over them with kube/conditions' transition rule,
and the held, refused and foreign cases."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconciler.sync import progress
from reconciler.sync.app_status import AppStatusInputs, app_status, git_status
from reconciler.sync.desired import DesiredState
from reconciler.sync.observe import observe
from reconciler.sync.outcome import Failed, Foreign
from tests.unit.reconciler.sync.test_sync_stages import (
    APP_NS,
    KIND,
    REPO,
    claim,
    live_and_copy,
    mapped_view,
)

T1, T2 = "2026-01-01T00:00:00Z", "2026-02-02T00:00:00Z"
LIVE = {
    "apiVersion": "anynines.com/v1",
    "kind": "PostgresqlInstance",
    "metadata": {"name": "db", "namespace": "team", "generation": 1},
}
PROVIDER = {
    "conditions": [
        {"type": "Ready", "status": "True", "reason": "Available"},
        {"type": "Synced", "status": "True", "reason": "ReconcileSuccess"},
    ]
}
COPY = {"metadata": {"generation": 1}, "status": PROVIDER}


def condition(status: Mapping[str, Any] | None, kind: str) -> dict | None:
    return next((c for c in (status or {}).get("conditions", []) if c["type"] == kind), None)


def shown(status: dict[str, Any] | None, now: str = T2, **inputs: Any) -> dict[str, Any] | None:
    """What the live claim whose status is ``status`` gets next, at ``now``."""
    return app_status(AppStatusInputs({**LIVE, "status": status}, COPY, now, **inputs))


def test_the_control_planes_status_is_copied_only_when_it_differs() -> None:
    assert app_status(AppStatusInputs(LIVE, COPY, T1)) == PROVIDER
    assert shown(PROVIDER) is None
    assert app_status(AppStatusInputs(LIVE, {"metadata": {}}, T1)) is None  # nothing to copy


def test_a_refused_claim_says_synced_false_over_the_providers_synced() -> None:
    status = app_status(AppStatusInputs(LIVE, COPY, T1, refused="claims/db.yaml: wrong"))
    synced = condition(status, "Synced")
    assert synced is not None
    # crossplane-runtime apis/common/v1/condition.go: TypeSynced, ReasonReconcileError
    assert (synced["status"], synced["reason"], synced["message"]) == (
        "False",
        "ReconcileError",
        "claims/db.yaml: wrong",
    )
    assert synced["lastTransitionTime"] == T1  # the provider's Synced was True: a transition
    assert condition(status, "Ready") == PROVIDER["conditions"][0]  # kept as it is
    assert [c["type"] for c in (status or {})["conditions"]] == ["Ready", "Synced"]


def test_a_told_refusal_keeps_its_transition_time_while_it_stays_false() -> None:
    first = app_status(AppStatusInputs(LIVE, COPY, T1, refused="wrong"))
    assert shown(first, refused="wrong") is None  # next pass: nothing to write
    other = shown(first, refused="wrong again")
    was, now = condition(first, "Synced"), condition(other, "Synced")
    assert was is not None
    assert now is not None
    assert now["message"] == "wrong again"
    assert now["lastTransitionTime"] == was["lastTransitionTime"] == T1


def test_fixed_the_claim_shows_the_providers_synced_again() -> None:
    refused = app_status(AppStatusInputs(LIVE, COPY, T1, refused="wrong"))
    assert shown(refused) == PROVIDER  # no top-level observedGeneration: this schema lacks it


def test_without_a_provider_status_only_our_own_condition_is_written_and_cleared() -> None:
    bare = {"metadata": {"generation": 1}}
    assert app_status(AppStatusInputs(LIVE, bare, T1)) is None
    refused = app_status(AppStatusInputs(LIVE, bare, T1, refused="wrong"))
    assert refused is not None
    assert [c["type"] for c in refused["conditions"]] == ["Synced"]
    cleared = app_status(AppStatusInputs({**LIVE, "status": refused}, bare, T2))
    assert cleared == {}  # no top-level observedGeneration: this schema lacks it
    assert app_status(AppStatusInputs({**LIVE, "status": {}}, bare, T2)) is None


def test_a_refusal_is_about_the_app_generation_where_the_schema_declares_it() -> None:
    live = {**LIVE, "metadata": {**LIVE["metadata"], "generation": 3}}
    stamped = app_status(AppStatusInputs(live, COPY, T1, refused="no", stamps=True, top=True))
    synced = condition(stamped, "Synced")
    assert synced is not None
    assert synced["observedGeneration"] == 3
    assert (stamped or {})["observedGeneration"] == 3
    plain = app_status(AppStatusInputs(live, COPY, T1, refused="no"))
    assert "observedGeneration" not in (condition(plain, "Synced") or {})
    assert "observedGeneration" not in (plain or {})


def test_a_held_deletion_says_ready_false_and_keeps_its_time_while_held() -> None:
    held = app_status(AppStatusInputs(LIVE, COPY, T1, held="db is being deleted"))
    ready = condition(held, "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False",
        progress.DELETION_HELD,
        T1,
    )
    assert condition(held, "Synced") == PROVIDER["conditions"][1]  # not a refusal
    assert shown(held, held="db is being deleted") is None
    again = shown(held, held="db is being deleted, still")
    assert (condition(again, "Ready") or {})["lastTransitionTime"] == T1


def test_a_held_deletion_after_another_ready_false_is_a_transition() -> None:
    """Ready False for the provider's reason, then held: the reason changed, so did the time."""
    unavailable = {"type": "Ready", "status": "False", "reason": "Unavailable"}
    before = {"conditions": [{**unavailable, "lastTransitionTime": T1}]}
    held = shown(before, held="held")
    assert (condition(held, "Ready") or {})["lastTransitionTime"] == T2


def test_a_refused_and_held_claim_says_both() -> None:
    status = app_status(AppStatusInputs(LIVE, COPY, T1, refused="wrong", held="held"))
    assert (condition(status, "Synced") or {})["reason"] == "ReconcileError"
    assert (condition(status, "Ready") or {})["reason"] == progress.DELETION_HELD


def test_gits_copy_of_a_held_claim_has_no_times() -> None:
    assert git_status(PROVIDER, None) is PROVIDER
    held = git_status(PROVIDER, "held")
    assert held is not None
    assert held["conditions"] == [
        PROVIDER["conditions"][1],
        {"type": "Ready", "status": "False", "reason": progress.DELETION_HELD, "message": "held"},
    ]
    assert PROVIDER["conditions"][0]["status"] == "True"  # the cache is never changed


def test_a_foreign_claim_gets_no_status_of_ours_where_a_failed_one_is_told() -> None:
    """A kind a foreign konnector serves is not mirrored: the konnector writes that claim's
    status; a failed apply of a mirrored claim is told on it."""
    view = mapped_view()
    live_and_copy(view)
    db = claim("db")
    foreign = Foreign(
        file="claims/db.yaml", message="not synced", fix="fix", document=0, identity=db.identity
    )
    observe(view, DesiredState((db,), ()), (), REPO, (foreign,))
    assert view.writes == []
    failed = Failed(file="claims/db.yaml", message="refused", fix="fix", identity=db.identity)
    observe(view, DesiredState((db,), ()), (db,), REPO, (failed,))
    status = view.app[(KIND, APP_NS, "db")]["status"]
    assert (condition(status, "Synced") or {})["reason"] == "ReconcileError"
