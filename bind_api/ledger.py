"""One use per browser bind session, recorded on the Control Plane so every replica agrees.

The session cookie itself is stateless (``bind_api.sessions``): replayed with its CSRF token, it
would still open. So ``POST /bind`` first creates a Lease named after a hash of the session's ID;
the apiserver's create is atomic, so exactly one request per session wins and any other, on any
replica, gets 409 and binds nothing. Each record names its expiry (the session's) and is deleted
after it by whichever replica records the next session.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.resources import LEASES

log = logging.getLogger(__name__)

SESSION_LABEL = "klutch.anynines.com/bind-session"
EXPIRES_ANNOTATION = "klutch.anynines.com/expires"
# Records outlive their session by this much: a replica whose clock runs behind still takes the
# cookie for a while after it expired here, and must still find the record.
CLOCK_SKEW_SECONDS = 300


def record_name(session_id: str) -> str:
    """The Lease's name: a hash, so the ID (a bearer secret of sorts) is never stored."""
    return f"bind-session-{hashlib.sha256(session_id.encode()).hexdigest()}"


def record(namespace: str, session_id: str, expires: int, now: int) -> dict[str, Any]:
    return {
        "apiVersion": LEASES.api_version,
        "kind": "Lease",
        "metadata": {
            "name": record_name(session_id),
            "namespace": namespace,
            "labels": {SESSION_LABEL: "used"},
            "annotations": {EXPIRES_ANNOTATION: str(expires)},
        },
        "spec": {"holderIdentity": "klutch-gitops-bind-api", "leaseDurationSeconds": expires - now},
    }


def expired(records: Iterable[Mapping[str, Any]], now: float) -> list[str]:
    """Names of the records whose session can no longer be presented (or that name no expiry)."""
    names = []
    for lease in records:
        stamp = (lease["metadata"].get("annotations") or {}).get(EXPIRES_ANNOTATION, "")
        if not stamp.isdigit() or int(stamp) + CLOCK_SKEW_SECONDS < now:
            names.append(lease["metadata"]["name"])
    return names


class SessionLedger:
    """Marks sessions used; ``use`` is True exactly once per session ID across all replicas."""

    def __init__(self, admin: Kube, namespace: str, clock: Callable[[], float] = time.time) -> None:
        self.admin = admin
        self.namespace = namespace
        self.clock = clock

    def use(self, session_id: str, expires: int) -> bool:
        now = int(self.clock())
        try:
            self.admin.create(LEASES, record(self.namespace, session_id, expires, now))
        except KubeError as error:
            if error.conflict:
                return False
            raise KlutchError(
                f"the bind API could not record this session's use ({error.status} "
                f"{error.reason}), so it bound nothing",
                f"let the bind API create Leases in namespace {self.namespace} (the chart's Role "
                "does), then log in again",
            ) from None
        self.collect()
        return True

    def collect(self) -> None:
        """Delete the records of expired sessions; a failure here never fails a binding."""
        try:
            leases, _ = self.admin.list(
                LEASES, self.namespace, label_selector=f"{SESSION_LABEL}=used"
            )
            for name in expired(leases, self.clock()):
                self.admin.delete(LEASES, self.namespace, name)
        except KubeError as error:
            log.warning("could not collect used bind sessions", extra={"error": str(error)})
