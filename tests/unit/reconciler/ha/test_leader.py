"""The leader election's decision: acquire a free or expired Lease, renew our own, else wait."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reconciler.ha.leader import Action, decide, format_time, lease_spec, parse_time

NOW = datetime(2025, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def lease(holder: str | None, renewed: datetime | None, duration: int | None = 15) -> dict:
    spec: dict = {"leaseTransitions": 3}
    if holder is not None:
        spec["holderIdentity"] = holder
    if renewed is not None:
        spec["acquireTime"] = spec["renewTime"] = format_time(renewed)
    if duration is not None:
        spec["leaseDurationSeconds"] = duration
    return {"metadata": {"name": "l", "resourceVersion": "7"}, "spec": spec}


@pytest.mark.parametrize(
    ("current", "action"),
    [
        (None, Action.ACQUIRE),  # absent: create it
        (lease("a", NOW), Action.RENEW),  # ours
        (lease("a", NOW - timedelta(seconds=60)), Action.RENEW),  # ours even when expired
        (lease("b", NOW - timedelta(seconds=5)), Action.WAIT),  # held
        (lease("b", NOW - timedelta(seconds=15)), Action.WAIT),  # expires only after the duration
        (lease("b", NOW - timedelta(seconds=16)), Action.ACQUIRE),  # expired
        (lease("", NOW), Action.ACQUIRE),  # released
        (lease(None, NOW), Action.ACQUIRE),
        (lease("b", None), Action.ACQUIRE),  # never renewed
        (lease("b", NOW, duration=None), Action.ACQUIRE),
    ],
)
def test_decide(current: dict | None, action: Action) -> None:
    assert decide(current, "a", NOW) is action


def test_times_round_trip_as_micro_time() -> None:
    assert format_time(NOW) == "2025-01-02T03:04:05.678901Z"
    assert parse_time(format_time(NOW)) == NOW
    assert parse_time("2025-01-02T03:04:05Z") == NOW.replace(microsecond=0)
    assert parse_time("soon") is None
    assert parse_time(None) is None


def test_creating_renewing_and_taking_over() -> None:
    stamp = format_time(NOW)
    created = lease_spec(None, "a", 15.0, NOW)
    assert created == {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": 0,
    }
    earlier = NOW - timedelta(seconds=4)
    renewed = lease_spec(lease("a", earlier), "a", 15.0, NOW)
    assert renewed["acquireTime"] == format_time(earlier)  # kept
    assert renewed["renewTime"] == stamp
    assert renewed["leaseTransitions"] == 3  # no transition
    taken = lease_spec(lease("b", earlier), "a", 15.0, NOW)
    assert (taken["holderIdentity"], taken["acquireTime"]) == ("a", stamp)
    assert taken["leaseTransitions"] == 4
