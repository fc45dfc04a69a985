"""Repositories spread over reconciler replicas through ``coordination.k8s.io`` Leases.

A repository belongs to one of N shards (a hash of its registration name), and a replica works on a
repository only while it holds that shard's Lease. Every replica keeps a member Lease alive; from
the live members, each replica computes the same owner for every shard by rendezvous hashing
(highest random weight), so a replica that joins or leaves moves only the shards that hash to it.

Safety comes from the shard Leases alone, with the leader election's semantics (``leader.py``): a
replica takes a shard only when its Lease is free or expired, every write carries the
``resourceVersion`` it read, and a replica that could not renew a shard within ``renewDeadline``
gives up at once (the manager exits, as client-go does). Membership only decides who should try:
replicas that briefly disagree about it delay a hand-over but never share a shard.

A hand-over is graceful when the owner changes while the old one lives (a replica joined or left
cleanly): the old owner keeps renewing while it drains the shard's work, then releases the Lease,
and the new owner takes it on its next round. A killed replica's shards move once their Leases
expire: within one lease duration and a retry period. A replica's first round only announces its
member Lease, so replicas started together see each other before they take shards.

A replica that receives a webhook for a shard it does not hold stamps the shard Lease with an
annotation; the holder sees it on its next renewal and fetches that shard's repositories.

The holder also records in its shard Leases, with each renewal it writes anyway, the commit each
of the shard's repositories last passed (``records.py``). A replica that takes the shard
over, after a kill too, reads it (``recorded``) to tell which repositories had a push nobody
applied yet, and starts with those (``reconciler/ha/handover.py``).
"""

from __future__ import annotations

import enum
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from klutch_gitops.config import LeaderElection
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.resources import LEASES
from reconciler.ha.leader import Action, decide, format_time, lease_spec, released_spec
from reconciler.ha.records import read_record, unseen_push, with_record

log = logging.getLogger(__name__)

GROUP_LABEL = "gitops.klutch.anynines.com/shard-group"  # the Lease name prefix
ROLE_LABEL = "gitops.klutch.anynines.com/shard-role"  # member | shard
FETCH_ANNOTATION = "gitops.klutch.anynines.com/fetch-requested"
STALE_MEMBER_LEASES = 10  # lease durations after which a dead member's Lease is deleted


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def shard_of(name: str, shards: int) -> int:
    """The shard of a registration: stable across replicas, releases and restarts."""
    return _hash(name) % shards


def assign(shards: int, members: Iterable[str]) -> dict[int, str]:
    """Each shard's owner among ``members``: the one with the highest weight for it."""
    candidates = sorted(set(members))
    if not candidates:
        return {}
    return {
        shard: max(candidates, key=lambda member: (_hash(f"{member}/{shard}"), member))
        for shard in range(shards)
    }


def shard_lease(prefix: str, shard: int) -> str:
    return f"{prefix}-shard-{shard}"


def member_lease(prefix: str, identity: str) -> str:
    """Identities hold characters a name may not (``pod_pid``): the name carries a hash."""
    return f"{prefix}-member-{hashlib.sha256(identity.encode()).hexdigest()[:12]}"


def live_members(leases: Iterable[Mapping[str, Any]], now: datetime) -> set[str]:
    """The holders of member Leases that have not expired."""
    return {
        lease["spec"]["holderIdentity"]
        for lease in leases
        if _role(lease) == "member" and decide(lease, "", now) is Action.WAIT
    }


def stale(lease: Mapping[str, Any], now: datetime) -> bool:
    """A member Lease whose holder has been gone for long: nobody will renew it again."""
    spec = lease.get("spec") or {}
    duration = spec.get("leaseDurationSeconds") or 1
    expired_at = decide(lease, "", now - timedelta(seconds=duration * STALE_MEMBER_LEASES))
    return expired_at is Action.ACQUIRE


class Step(enum.Enum):
    NONE = "none"  # not ours, and not ours to take now
    ACQUIRE = "acquire"
    RENEW = "renew"
    RELEASE = "release"  # ours, but another replica should own it: drain, then release
    LOST = "lost"  # we held it, and now another does or it is gone


def step(
    lease: Mapping[str, Any] | None, identity: str, owner: str | None, held: bool, now: datetime
) -> Step:
    """What ``identity`` does with one shard's Lease this round."""
    holder = ((lease or {}).get("spec") or {}).get("holderIdentity")
    if held:
        if holder != identity:
            return Step.LOST
        return Step.RENEW if owner == identity else Step.RELEASE
    if owner != identity:
        return Step.NONE
    return Step.NONE if decide(lease, identity, now) is Action.WAIT else Step.ACQUIRE


def _role(lease: Mapping[str, Any]) -> str | None:
    return ((lease.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL)


def _annotation(lease: Mapping[str, Any] | None, name: str = FETCH_ANNOTATION) -> str | None:
    return (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(name)


class ShardCoordinator:
    """Holds this replica's member Lease and its shard Leases, in one thread.

    Callbacks, all from that thread except ``on_releasing``: ``on_acquired(shard)`` must not block
    (it enqueues work); ``on_releasing(shard)`` runs in a thread of its own and returns once the
    shard's work has stopped, after which the Lease is released; ``on_fetch(shard)`` follows a
    webhook stamp; ``on_lost()`` ends the process. ``record(shard)``, from that thread too, names
    the commit each of the shard's repositories last passed here, for the Lease's record.
    """

    def __init__(
        self,
        kube: Kube,
        settings: LeaderElection,
        identity: str,
        on_acquired: Callable[[int], None],
        on_releasing: Callable[[int], None],
        on_fetch: Callable[[int], None],
        on_lost: Callable[[], None],
        record: Callable[[int], Mapping[str, str]] | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.shards = settings.shards
        self.identity = identity
        self.on_acquired = on_acquired
        self.on_releasing = on_releasing
        self.on_fetch = on_fetch
        self.on_lost = on_lost
        self.record = record
        self._held: dict[int, float] = {}  # shard -> monotonic time of its last renewal
        self._draining: set[int] = set()  # held, being drained before the release
        self._drained: set[int] = set()  # drained: release on the next round
        self._stamps: dict[int, str | None] = {}  # the fetch annotation last seen per shard
        self._recorded: dict[int, dict[str, str]] = {}  # the record found when taking a shard
        self._unseen: dict[int, str | None] = {}  # a stamped push its last holder did not see
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.lost = False
        self.rounds = 0
        self._thread = threading.Thread(target=self._run, name="shards", daemon=True)

    # -- what the manager asks ------------------------------------------------------------------

    def shard(self, name: str) -> int:
        return shard_of(name, self.shards)

    def owns(self, name: str) -> bool:
        """Whether this replica may work on registration ``name`` now."""
        shard = self.shard(name)
        with self._lock:
            return shard in self._held and shard not in self._draining and not self.lost

    def held(self) -> list[int]:
        with self._lock:
            return sorted(self._held)

    def recorded(self, shard: int) -> dict[str, str]:
        """The commits the shard's previous holder recorded as passed, when this replica took it."""
        with self._lock:
            return dict(self._recorded.get(shard, {}))

    def unseen(self, shard: int) -> str | None:
        """The registration a webhook stamped on the shard's Lease after its last renewal before
        this replica took it: a push its previous holder likely never fetched."""
        with self._lock:
            return self._unseen.get(shard)

    def start(self) -> ShardCoordinator:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop competing, release every shard and leave. Call it after the work stopped."""
        self._stop.set()
        self._thread.join()
        for shard in self.held():
            self._release(shard)
        try:
            self.kube.delete(LEASES, self.settings.namespace, self._member_name)
        except KubeError as error:
            log.warning("could not delete the member lease", extra={"error": str(error)})

    def request_fetch(self, shard: int, name: str | None = None) -> None:
        """Ask the shard's holder, whoever it is, to fetch its repositories; ``name``, the pushed
        registration, tells a replica that takes the shard over where to start."""
        stamp = f"{format_time(datetime.now(UTC))} {self.identity}" + (f" {name}" if name else "")
        try:
            self.kube.patch(
                LEASES,
                self.settings.namespace,
                shard_lease(self.settings.name, shard),
                {"metadata": {"annotations": {FETCH_ANNOTATION: stamp}}},
            )
        except KubeError as error:  # no Lease yet: its first holder fetches anyway
            log.info("could not stamp a shard lease", extra={"shard": shard, "error": str(error)})

    # -- the loop -------------------------------------------------------------------------------

    @property
    def _member_name(self) -> str:
        return member_lease(self.settings.name, self.identity)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                kept = self._round()
            except KubeError as error:  # the API server is away: the deadline decides
                log.info("shard round failed", extra={"error": str(error)})
                kept = True
            if not kept or self._expired():
                self._give_up()
                return
            self.rounds += 1
            self._stop.wait(self.settings.retry_period)

    def _expired(self) -> bool:
        """A held shard not renewed within the deadline may soon be taken by another replica."""
        now = time.monotonic()
        with self._lock:
            deadline = self.settings.renew_deadline
            return any(now - renewed > deadline for renewed in self._held.values())

    def _give_up(self) -> None:
        log.error("lost shard leases", extra={"identity": self.identity, "shards": self.held()})
        with self._lock:
            self.lost = True
        self.on_lost()

    def _round(self) -> bool:
        """One pass over every shard; False when a held shard was lost."""
        namespace, prefix = self.settings.namespace, self.settings.name
        self._renew_member()
        items, _ = self.kube.list(LEASES, namespace, label_selector=f"{GROUP_LABEL}={prefix}")
        now = datetime.now(UTC)
        leases = {item["metadata"]["name"]: item for item in items}
        owners = assign(self.shards, live_members(items, now) | {self.identity})
        for shard in range(self.shards):
            lease = leases.get(shard_lease(prefix, shard))
            with self._lock:
                held, drained = shard in self._held, shard in self._drained
            action = step(lease, self.identity, owners.get(shard), held, now)
            if action is Step.LOST:
                return False
            try:
                if action is Step.ACQUIRE and self.rounds:  # the first round only announces
                    self._acquire(shard, lease, now)
                elif action is Step.RELEASE and drained:
                    self._release(shard)
                elif action in (Step.RENEW, Step.RELEASE):
                    self._write(shard, lease, now)
                    self._follow_stamp(shard, lease)
                    if action is Step.RELEASE:
                        self._drain(shard)
            except KubeError as error:  # a 409 after a stamp: renewed on the next round
                log.info("shard lease write failed", extra={"shard": shard, "error": str(error)})
        for item in items:
            if _role(item) == "member" and stale(item, now):
                self.kube.delete(LEASES, namespace, item["metadata"]["name"])
        return True

    def _renew_member(self) -> None:
        now = datetime.now(UTC)
        lease = self.kube.get(LEASES, self.settings.namespace, self._member_name)
        self._put(self._member_name, "member", lease, now)

    def _acquire(self, shard: int, lease: Mapping[str, Any] | None, now: datetime) -> None:
        """Take the shard (a 409 means another replica wrote first) and start its work, which
        begins with a fetch: any stamp so far is covered."""
        with self._lock:
            self._recorded[shard] = read_record(lease)
            self._unseen[shard] = unseen_push(_annotation(lease), lease)
        self._write(shard, lease, now)
        self._stamps[shard] = _annotation(lease)
        log.info("acquired a shard", extra={"shard": shard, "identity": self.identity})
        self.on_acquired(shard)

    def _write(self, shard: int, lease: Mapping[str, Any] | None, now: datetime) -> None:
        """Acquire or renew; a failed renewal counts against the deadline, not at once. The
        record keeps what the previous holder noted for repositories not passed here yet."""
        record = self._record(shard)
        if lease is not None and (record or read_record(lease)):
            lease = with_record(lease, record)
        self._put(shard_lease(self.settings.name, shard), "shard", lease, now)
        with self._lock:
            self._held[shard] = time.monotonic()

    def _record(self, shard: int) -> dict[str, str]:
        with self._lock:
            record = dict(self._recorded.get(shard, {}))
        if self.record is not None:
            record.update(self.record(shard))
        return record

    def _put(self, name: str, role: str, lease: Mapping[str, Any] | None, now: datetime) -> None:
        spec = lease_spec(lease, self.identity, self.settings.lease_duration, now)
        if lease is None:
            self.kube.create(
                LEASES,
                {
                    "apiVersion": LEASES.api_version,
                    "kind": LEASES.kind,
                    "metadata": {
                        "namespace": self.settings.namespace,
                        "name": name,
                        "labels": {GROUP_LABEL: self.settings.name, ROLE_LABEL: role},
                    },
                    "spec": spec,
                },
            )
        else:
            self.kube.replace(LEASES, {**lease, "spec": spec})

    def _follow_stamp(self, shard: int, lease: Mapping[str, Any] | None) -> None:
        stamp = _annotation(lease)
        if stamp != self._stamps.get(shard):
            self._stamps[shard] = stamp
            self.on_fetch(shard)

    def _drain(self, shard: int) -> None:
        with self._lock:
            if shard in self._draining:
                return
            self._draining.add(shard)
        log.info("handing a shard over", extra={"shard": shard, "identity": self.identity})

        def drain() -> None:
            self.on_releasing(shard)
            with self._lock:
                self._drained.add(shard)

        threading.Thread(target=drain, name=f"drain-{shard}", daemon=True).start()

    def _release(self, shard: int) -> None:
        """Clear the holder, if it is still us, so the new owner need not wait for the expiry."""
        name = shard_lease(self.settings.name, shard)
        try:
            lease = self.kube.get(LEASES, self.settings.namespace, name)
            if lease is not None and lease["spec"].get("holderIdentity") == self.identity:
                spec = released_spec(lease, datetime.now(UTC))
                self.kube.replace(LEASES, {**lease, "spec": spec})
        except KubeError as error:  # it expires on its own
            log.warning("could not release a shard", extra={"shard": shard, "error": str(error)})
        with self._lock:
            self._held.pop(shard, None)
            self._recorded.pop(shard, None)
            self._unseen.pop(shard, None)
            self._draining.discard(shard)
            self._drained.discard(shard)
        log.info("released a shard", extra={"shard": shard, "identity": self.identity})
