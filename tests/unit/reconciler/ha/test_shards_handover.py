"""A take-over starts with the repositories that have a push pending: the shard Lease's record
of passed commits, the triage that compares it with the remotes' heads, and the order the work
queues then hand registrations and first passes out in."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from klutch_gitops.config_file import defaults
from klutch_gitops.kube.workqueue import WorkQueue
from reconciler.ha.handover import Lanes, TakeOver, pending, status_commits
from reconciler.ha.leader import format_time
from reconciler.ha.records import RECORD_ANNOTATION, read_record, unseen_push, with_record
from reconciler.ha.shards import GROUP_LABEL, ROLE_LABEL, ShardCoordinator, shard_lease
from reconciler.work import Key

pytestmark = pytest.mark.unit

A, B, C = "a" * 40, "b" * 40, "c" * 40


def drain(queue: WorkQueue[Key]) -> list[Key]:
    taken = []
    while (key := queue.get(timeout=0)) is not None:
        taken.append(key)
        queue.done(key)
    return taken


def lanes() -> Lanes:
    return Lanes(WorkQueue(), WorkQueue())


def test_a_record_round_trips_and_an_unreadable_one_counts_as_none() -> None:
    lease = {"metadata": {"name": "x", "annotations": {"other": "kept"}}, "spec": {}}
    recorded = with_record(lease, {"team-b": B, "team-a": A})
    assert recorded["metadata"]["annotations"]["other"] == "kept"
    assert read_record(recorded) == {"team-a": A, "team-b": B}
    assert RECORD_ANNOTATION not in with_record(recorded, {})["metadata"]["annotations"]
    for text in ("{not json", '["a"]', '{"team-a": 1}'):
        assert read_record({"metadata": {"annotations": {RECORD_ANNOTATION: text}}}) == {}
    assert read_record(None) == {}


def test_a_stamped_push_after_the_last_renewal_was_not_seen() -> None:
    renewed = {"spec": {"renewTime": "2026-11-25T06:00:00.000000Z"}}
    assert unseen_push("2026-11-25T06:00:01.000000Z b team-a", renewed) == "team-a"
    assert unseen_push("2026-11-25T05:59:59.000000Z b team-a", renewed) is None  # renewed since
    assert unseen_push("2026-11-25T06:00:01.000000Z b", renewed) is None  # an older replica's
    assert unseen_push(None, renewed) is None


def test_a_stamped_repository_goes_first_without_asking_its_remote() -> None:
    order = lanes()
    asked: list[str] = []
    take_over = TakeOver(order, lambda name: asked.append(name) or A, lambda _name: set())
    take_over.run(["one", "two"], {}, stamped="two")
    assert [name for _, name in drain(order.registering)] == ["two", "one"]
    assert asked == []  # nothing known as passed: no remote asked
    take_over.stop()


def test_a_push_is_pending_only_when_the_head_is_known_to_differ() -> None:
    assert pending(B, {A})
    assert not pending(A, {A, C})
    assert not pending(B, set())  # nothing known: no claim either way
    assert not pending(None, {A})  # the branch is gone, or no answer
    status = {"lastAppliedCommit": A, "lastStatusCommit": B, "lastFetchedCommit": C}
    assert status_commits(status) == {A, B}  # fetched but not applied is not passed
    assert status_commits(None) == set()


def test_the_take_over_registers_and_passes_pending_repositories_first() -> None:
    heads = {"one": A, "two": B, "three": C, "four": A, "gone": None}
    recorded = {"one": A, "two": A, "three": C, "gone": A}  # "four": nothing recorded
    order = lanes()
    take_over = TakeOver(order, heads.__getitem__, lambda name: {C} if name == "four" else set())
    take_over.run(["one", "two", "three", "four", "gone"], recorded)
    registrations = drain(order.registering)
    assert registrations[0] == ("register", "two")
    assert registrations[1] == ("register", "four")  # a clone on disk at C
    assert [k for k in registrations[2:]] == [("register", n) for n in ("one", "three", "gone")]
    for _, name in registrations:  # each registration queues the first pass
        order.add(("sync", name))
    assert [name for _, name in drain(order.passes)][:2] == ["two", "four"]
    take_over.stop()


def test_an_urgent_repository_is_an_ordinary_one_after_its_first_pass() -> None:
    order = lanes()
    order.add(("sync", "other"))
    order.prioritise("late")  # nothing queued yet: it goes first once it comes
    order.add(("sync", "late"))
    order.add(("writeback", "late"))
    assert drain(order.passes) == [("sync", "late"), ("writeback", "late"), ("sync", "other")]
    order.passed("late")
    order.add(("sync", "other"))
    order.add(("sync", "late"))
    assert drain(order.passes) == [("sync", "other"), ("sync", "late")]


def test_a_late_answer_still_promotes_a_waiting_registration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reconciler.ha.handover as handover

    monkeypatch.setattr(handover, "TRIAGE_SECONDS", 0.0)
    answer = threading.Event()

    def head(name: str) -> str:
        if name == "slow":
            answer.wait(5)
            return B  # pushed
        return A  # passed already

    order = lanes()
    take_over = TakeOver(order, head, lambda _name: {A})
    take_over.run(["fast", "other", "slow"], {})  # slow is not answered before this returns
    answer.set()
    take_over.pool.shutdown(wait=True)  # its answer came: the callback ran
    assert [name for _, name in drain(order.registering)] == ["slow", "fast", "other"]
    assert order.urgent("slow")
    assert not order.urgent("fast")


class FakeLeases:
    """The Lease calls a shard coordinator makes, kept in memory with resourceVersions."""

    def __init__(self) -> None:
        self.leases: dict[str, dict] = {}
        self.version = 0

    def _store(self, obj: Mapping[str, Any]) -> dict:
        self.version += 1
        stored = copy.deepcopy(dict(obj))
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[stored["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def get(self, _resource: object, _namespace: str, name: str) -> dict | None:
        return copy.deepcopy(self.leases.get(name))

    def list(self, _resource: object, _namespace: str, label_selector: str = "") -> tuple:
        return [copy.deepcopy(lease) for lease in self.leases.values()], ""

    def create(self, _resource: object, obj: Mapping[str, Any]) -> dict:
        return self._store(obj)

    def replace(self, _resource: object, obj: Mapping[str, Any]) -> dict:
        return self._store(obj)

    def delete(self, _resource: object, _namespace: str, name: str) -> None:
        self.leases.pop(name, None)


def test_a_shard_taker_reads_the_record_and_keeps_it_until_it_passed_itself() -> None:
    settings = replace(defaults().leader_election, enabled=True, namespace="ns", name="g", shards=1)
    kube = FakeLeases()
    long_ago = format_time(datetime.now(UTC) - timedelta(minutes=5))
    kube.create(
        None,
        with_record(
            {
                "metadata": {
                    "name": shard_lease("g", 0),
                    "labels": {GROUP_LABEL: "g", ROLE_LABEL: "shard"},
                },
                "spec": {
                    "holderIdentity": "killed",
                    "leaseDurationSeconds": 15,
                    "renewTime": long_ago,
                    "acquireTime": long_ago,
                    "leaseTransitions": 0,
                },
            },
            {"team-a": A, "team-b": A},
        ),
    )
    acquired: list[dict[str, str]] = []
    passed: dict[str, str] = {}
    coordinator = ShardCoordinator(
        kube,  # type: ignore[arg-type]
        settings,
        "taker",
        lambda shard: acquired.append(coordinator.recorded(shard)),
        lambda _shard: None,
        lambda _shard: None,
        lambda: None,
        lambda _shard: dict(passed),
    )
    coordinator.rounds = 1  # past the announcing round
    assert coordinator._round()
    assert acquired == [{"team-a": A, "team-b": A}]
    lease = kube.leases[shard_lease("g", 0)]
    assert lease["spec"]["holderIdentity"] == "taker"
    assert read_record(lease) == {"team-a": A, "team-b": A}  # kept for a taker after us
    passed["team-b"] = B
    assert coordinator._round()
    assert read_record(kube.leases[shard_lease("g", 0)]) == {"team-a": A, "team-b": B}


def test_other_registrations_hold_back_until_the_urgent_first_pass() -> None:
    order = lanes()
    order.prioritise("urgent")
    order.hold("urgent")  # its own registration never waits
    done: list[str] = []
    held = threading.Thread(target=lambda: (order.hold("other"), done.append("other")))
    held.start()
    held.join(0.3)
    assert held.is_alive()  # still waiting for the urgent repository's first pass
    done.append("urgent passed")
    order.passed("urgent")
    held.join(5)
    assert done == ["urgent passed", "other"]
    order.hold("third")  # nothing urgent: no wait


def test_an_urgent_repository_that_never_passes_holds_the_others_only_for_a_while() -> None:
    now = [100.0]
    order = Lanes(WorkQueue(), WorkQueue(), clock=lambda: now[0])
    order.prioritise("broken")
    now[0] += 60  # long past HOLD_SECONDS
    order.hold("other")  # returns at once
    order.shutdown()
    order.prioritise("again")
    order.hold("other")  # a stopping reconciler holds nothing back
