"""The work queue's front lane: keys added ``first`` (or promoted) are handed out before the rest,
and the queue keeps its other promises (once per key, re-queued after ``done``, depth metrics)."""

from collections.abc import Hashable

import pytest

from klutch_gitops.kube.workqueue import WorkQueue

pytestmark = pytest.mark.unit


class Observer:
    """Records the depths a queue reports."""

    def __init__(self) -> None:
        self.depths: list[int] = []
        self.started_at: list[tuple[Hashable, int]] = []

    def added(self, depth: int) -> None:
        self.depths.append(depth)

    def started(self, key: Hashable, waited: float, depth: int) -> None:
        self.started_at.append((key, depth))

    def finished(self, key: Hashable) -> None:
        pass

    def retried(self) -> None:
        pass


def drain(queue: WorkQueue[str]) -> list[str]:
    taken = []
    while (key := queue.get(timeout=0)) is not None:
        taken.append(key)
        queue.done(key)
    return taken


def test_keys_added_first_are_handed_out_before_the_others_in_their_own_order() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ["a", "b", "c"]:
        queue.add(key)
    queue.add("x", first=True)
    queue.add("d")
    queue.add("y", first=True)
    assert drain(queue) == ["x", "y", "a", "b", "c", "d"]


def test_a_waiting_key_added_first_moves_to_the_front_once() -> None:
    observer = Observer()
    queue: WorkQueue[str] = WorkQueue(observer=observer)
    for key in ["a", "b", "c"]:
        queue.add(key)
    queue.add("c", first=True)
    queue.add("c")  # a plain add of a key in front leaves it there
    assert len(queue) == 3
    assert drain(queue) == ["c", "a", "b"]
    assert observer.depths == [1, 2, 3]  # the move is no add
    assert [depth for _, depth in observer.started_at] == [2, 1, 0]


def test_promote_moves_a_waiting_key_and_never_adds_one() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    queue.add("b")
    queue.promote("b")
    queue.promote("z")  # not queued: nothing happens
    assert drain(queue) == ["b", "a"]
    queue.add("z")
    assert drain(queue) == ["z"]


def test_a_key_promoted_while_handled_goes_to_the_front_when_added_again() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("b")
    queue.add("a", first=True)  # handled now: queued again after done, in front
    assert queue.get(timeout=0) == "b"  # never two workers on "a"
    queue.done("a")
    queue.add("c")
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    queue.done("b")
    assert drain(queue) == ["c"]


def test_a_promotion_not_followed_by_an_add_does_not_stick() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.promote("a")
    queue.done("a")  # not added meanwhile: not queued, and its mark is gone
    queue.add("b")
    queue.add("a")
    assert drain(queue) == ["b", "a"]
