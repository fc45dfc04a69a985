"""The poller's schedule (reconciler/triggers/sources.py): each remote at its own interval, one
thread waking at the earliest due time, a shortened interval taking effect at once."""

from __future__ import annotations

import pytest

from reconciler.triggers.sources import JITTER, due_now, next_poll, rescheduled


def test_the_next_ask_is_one_period_later_spread_by_the_jitter() -> None:
    assert next_poll(100.0, 30.0, 0.5) == pytest.approx(130.0)
    assert next_poll(100.0, 30.0, 0.0) == pytest.approx(100.0 + 30.0 * (1 - JITTER))
    assert next_poll(100.0, 30.0, 0.999999) == pytest.approx(100.0 + 30.0 * (1 + JITTER))


def test_a_new_or_re_pointed_remote_is_asked_at_once() -> None:
    assert rescheduled(None, 50.0, 3600.0, 0.5) == 50.0


def test_a_shortened_interval_takes_effect_now_a_lengthened_one_after_the_planned_ask() -> None:
    planned_in_an_hour = 50.0 + 3600.0
    assert rescheduled(planned_in_an_hour, 50.0, 2.0, 0.5) == pytest.approx(52.0)
    planned_in_two_seconds = 52.0
    assert rescheduled(planned_in_two_seconds, 50.0, 3600.0, 0.5) == 52.0


def test_due_remotes_come_earliest_first_and_the_wait_is_until_the_earliest_other() -> None:
    dues = {"hourly": 3650.0, "fast": 52.0, "late": 49.0, "later": 48.0}
    assert due_now(dues, 50.0) == (["later", "late"], 0.0)
    assert due_now({"hourly": 3650.0, "fast": 52.0}, 50.0) == ([], pytest.approx(2.0))
    assert due_now({}, 50.0) == ([], None)


def test_a_two_second_remote_is_asked_many_times_while_an_hourly_one_waits() -> None:
    """Stepping the clock through the schedule the poller thread follows: 60 s of it."""
    periods = {"fast": 2.0, "hourly": 3600.0, "watched": 2.0 * 10}  # a file:// safety net
    dues = {key: rescheduled(None, 0.0, period, 0.5) for key, period in periods.items()}
    asked = {key: 0 for key in periods}
    now = 0.0
    while now <= 60.0:
        keys, wait = due_now(dues, now)
        for key in keys:
            asked[key] += 1
            dues[key] = next_poll(now, periods[key], 0.5)
        now += wait if wait else 0.0
    assert asked == {"fast": 31, "hourly": 1, "watched": 4}
