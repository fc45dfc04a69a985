"""The test kit's pure parts: what ``eventually`` returns and retries, and which bot commits the
history checks call duplicates or count as touching a file."""

from __future__ import annotations

import pytest

from tests.kit.git import BOT, Commit, duplicates, touching
from tests.kit.wait import TimedOut, eventually


def test_eventually_returns_the_first_truthy_answer_and_retries_assertions() -> None:
    answers = iter([None, AssertionError("not yet"), 0, "ready", "later"])

    def check() -> object:
        answer = next(answers)
        if isinstance(answer, AssertionError):
            raise answer
        return answer

    assert eventually(check, "an answer", timeout=5, interval=0) == "ready"


def test_eventually_times_out_naming_what_it_waited_for_and_the_last_answer() -> None:
    def check() -> None:
        raise AssertionError("App Cluster: missing ['db']")

    with pytest.raises(TimedOut, match=r"the claim everywhere .*missing \['db'\]"):
        eventually(check, "the claim everywhere", timeout=0.05, interval=0.01)


def test_other_errors_are_not_retried() -> None:
    def check() -> None:
        raise KeyError("broken")

    with pytest.raises(KeyError):
        eventually(check, "anything", timeout=5)


def test_duplicates_are_bot_commits_with_equal_message_and_change() -> None:
    history = [
        Commit("a", BOT, "status of 1111", ("claims/db.yaml",), "+ready"),
        Commit("b", "Human Developer", "status of 1111", ("claims/db.yaml",), "+ready"),
        Commit("c", BOT, "status of 1111", ("claims/db.yaml",), "+ready"),
        Commit("d", BOT, "status of 2222", ("claims/db.yaml",), "+ready"),
        Commit("e", BOT, "status of 1111", ("claims/db.yaml",), "+host"),
        Commit("f", BOT, "status of 1111", ("claims/db.yaml",), "+ready"),
    ]
    assert duplicates(history) == [("a", "c"), ("a", "f")]


def test_touching_counts_the_bot_commits_that_changed_the_file() -> None:
    history = [
        Commit("a", BOT, "status", ("claims/db.yaml", "claims/.klutch/reconcile.yaml"), ""),
        Commit("b", "Human Developer", "edit", ("claims/db.yaml",), ""),
        Commit("c", BOT, "status", ("claims/other.yaml",), ""),
    ]
    assert [c.sha for c in touching(history, "claims/db.yaml")] == ["a"]
