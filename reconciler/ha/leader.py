"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics.

A candidate takes the Lease when it is absent, released (no holder) or expired (``renewTime`` +
``leaseDurationSeconds`` in the past), and the leader renews it every retry period. Every write
carries the ``resourceVersion`` it read, so of two candidates only one wins (the other gets a 409).
A leader that sees another holder, or could not renew for ``renewDeadline``, steps down; it never
competes again (its process is expected to exit and restart). A clean stop clears the holder so a
standby takes over at its next attempt instead of waiting for the Lease to expire.
"""

from __future__ import annotations

import enum
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from klutch_gitops.config import LeaderElection
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.resources import LEASES

log = logging.getLogger(__name__)


class Action(enum.Enum):
    ACQUIRE = "acquire"  # the Lease is free: take it
    RENEW = "renew"  # it is ours: renew it
    WAIT = "wait"  # another candidate holds it


def default_identity() -> str:
    """The Pod's name (``POD_NAME``) or the host's, with the process id."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.getpid()}"


def parse_time(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value) if value else None
    except ValueError:
        return None


def format_time(moment: datetime) -> str:
    """A MicroTime, as the API server writes it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def decide(lease: Mapping[str, Any] | None, identity: str, now: datetime) -> Action:
    """What ``identity`` may do with ``lease`` (None: there is none) at ``now``."""
    if lease is None:
        return Action.ACQUIRE
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    if holder == identity:
        return Action.RENEW
    renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    if not holder or renewed is None or not isinstance(duration, int):
        return Action.ACQUIRE
    return Action.ACQUIRE if renewed + timedelta(seconds=duration) < now else Action.WAIT


def lease_spec(
    lease: Mapping[str, Any] | None, identity: str, duration: float, now: datetime
) -> dict[str, Any]:
    """The spec that acquires or renews ``lease`` for ``identity``."""
    old = (lease or {}).get("spec") or {}
    stamp = format_time(now)
    spec: dict[str, Any] = {
        "holderIdentity": identity,
        "leaseDurationSeconds": max(1, round(duration)),
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": old.get("leaseTransitions") or 0,
    }
    if old.get("holderIdentity") == identity:
        spec["acquireTime"] = old.get("acquireTime") or stamp
    elif lease is not None:
        spec["leaseTransitions"] += 1
    return spec


def released_spec(lease: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The spec of ``lease`` given up: no holder, so the next candidate takes it at once."""
    stamp = format_time(now)
    return {
        "leaseDurationSeconds": 1,
        "acquireTime": stamp,
        "renewTime": stamp,
        "leaseTransitions": (lease.get("spec") or {}).get("leaseTransitions") or 0,
    }


class LeaderElector:
    """Competes for one Lease in a thread; calls ``on_started`` once when it becomes the leader
    (in a thread of its own, so renewal goes on) and ``on_lost`` once if it steps down."""

    def __init__(
        self,
        kube: Kube,
        settings: LeaderElection,
        identity: str,
        on_started: Callable[[], None],
        on_lost: Callable[[], None],
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.identity = identity
        self.on_started = on_started
        self.on_lost = on_lost
        self.leading = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def start(self) -> LeaderElector:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop competing; a leader releases the Lease. Call it after the leader's work stopped."""
        self._stop.set()
        self._thread.join()
        if self.leading.is_set():
            self.leading.clear()
            self._release()

    def _run(self) -> None:
        renewed_at = 0.0
        while not self._stop.is_set():
            try:
                outcome = self._try_acquire_or_renew()
            except KubeError as error:  # a 409 included: another candidate wrote first
                log.info("could not acquire or renew the lease", extra={"error": str(error)})
                outcome = None
            if outcome is Action.RENEW or outcome is Action.ACQUIRE:
                renewed_at = time.monotonic()
                if not self.leading.is_set():
                    log.info("became the leader", extra={"identity": self.identity})
                    self.leading.set()
                    threading.Thread(target=self.on_started, name="leader", daemon=True).start()
            elif self.leading.is_set() and (
                outcome is Action.WAIT
                or time.monotonic() - renewed_at > self.settings.renew_deadline
            ):
                log.error(
                    "lost the leadership",
                    extra={"identity": self.identity, "lease": self.settings.name},
                )
                self.leading.clear()
                self.on_lost()
                return
            self._stop.wait(self.settings.retry_period)

    def _try_acquire_or_renew(self) -> Action:
        """One attempt; RENEW or ACQUIRE when the Lease is now ours, WAIT when another holds it."""
        namespace, name = self.settings.namespace, self.settings.name
        lease = self.kube.get(LEASES, namespace, name)
        now = datetime.now(UTC)
        action = decide(lease, self.identity, now)
        if action is Action.WAIT:
            return action
        spec = lease_spec(lease, self.identity, self.settings.lease_duration, now)
        if lease is None:
            self.kube.create(
                LEASES,
                {
                    "apiVersion": LEASES.api_version,
                    "kind": LEASES.kind,
                    "metadata": {"namespace": namespace, "name": name},
                    "spec": spec,
                },
            )
        else:
            self.kube.replace(LEASES, {**lease, "spec": spec})
        return action

    def _release(self) -> None:
        """Clear the holder, if it is still us, so a standby need not wait for the expiry."""
        try:
            lease = self.kube.get(LEASES, self.settings.namespace, self.settings.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            self.kube.replace(LEASES, {**lease, "spec": released_spec(lease, datetime.now(UTC))})
            log.info("released the lease", extra={"identity": self.identity})
        except KubeError as error:
            log.warning("could not release the lease", extra={"error": str(error)})
