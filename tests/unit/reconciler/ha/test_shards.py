"""The pure decisions of repository sharding: which shard a repository is in, which replica owns
a shard, who is alive, and what a replica does with each shard Lease."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from reconciler.ha.leader import format_time
from reconciler.ha.shards import (
    ROLE_LABEL,
    Step,
    assign,
    live_members,
    member_lease,
    shard_lease,
    shard_of,
    stale,
    step,
)

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


def lease(holder: str | None, renewed: datetime = NOW, role: str = "shard") -> dict:
    spec: dict = {"leaseDurationSeconds": 15, "renewTime": format_time(renewed)}
    if holder:
        spec["holderIdentity"] = holder
    return {"metadata": {"name": "x", "labels": {ROLE_LABEL: role}}, "spec": spec}


def test_a_repository_always_lands_in_the_same_shard_and_shards_fill_evenly() -> None:
    assert shard_of("team-a", 16) == shard_of("team-a", 16)
    counts = Counter(shard_of(f"consumer-{i}.repo", 16) for i in range(1600))
    assert set(counts) == set(range(16))
    assert max(counts.values()) < 2 * min(counts.values())


def test_every_shard_has_one_owner_and_a_lost_member_moves_only_its_shards() -> None:
    three = assign(64, ["a", "b", "c"])
    assert set(three) == set(range(64))
    assert Counter(three.values()).keys() == {"a", "b", "c"}
    two = assign(64, ["a", "c"])
    moved = {shard for shard in range(64) if three[shard] != two[shard]}
    assert moved == {shard for shard, owner in three.items() if owner == "b"}
    # Joining takes shards only for the newcomer.
    four = assign(64, ["a", "b", "c", "d"])
    assert all(four[s] in (three[s], "d") for s in range(64))
    assert assign(4, []) == {}


def test_members_are_the_holders_of_unexpired_member_leases() -> None:
    leases = [
        lease("alive", NOW - timedelta(seconds=5), role="member"),
        lease("expired", NOW - timedelta(seconds=20), role="member"),
        lease("released", role="member") | {"spec": {"leaseDurationSeconds": 15}},
        lease("a-shard-holder"),
    ]
    assert live_members(leases, NOW) == {"alive"}
    assert not stale(leases[1], NOW)
    assert stale(lease("gone", NOW - timedelta(minutes=10), role="member"), NOW)


def test_each_shard_step_follows_the_holder_and_the_owner() -> None:
    free, mine, theirs = lease(None), lease("me"), lease("other")
    expired = lease("other", NOW - timedelta(seconds=16))
    assert step(None, "me", "me", held=False, now=NOW) is Step.ACQUIRE
    assert step(free, "me", "me", held=False, now=NOW) is Step.ACQUIRE
    assert step(expired, "me", "me", held=False, now=NOW) is Step.ACQUIRE
    assert step(theirs, "me", "me", held=False, now=NOW) is Step.NONE  # wait for it
    assert step(free, "me", "other", held=False, now=NOW) is Step.NONE  # not ours to take
    assert step(mine, "me", "me", held=True, now=NOW) is Step.RENEW
    assert step(mine, "me", "other", held=True, now=NOW) is Step.RELEASE
    assert step(theirs, "me", "me", held=True, now=NOW) is Step.LOST
    assert step(None, "me", "me", held=True, now=NOW) is Step.LOST


def test_lease_names_are_valid_object_names() -> None:
    assert shard_lease("klutch-gitops-reconciler", 7) == "klutch-gitops-reconciler-shard-7"
    name = member_lease("klutch-gitops-reconciler", "pod-abc_123")
    assert name.startswith("klutch-gitops-reconciler-member-")
    assert len(name) <= 63
    assert "_" not in name
