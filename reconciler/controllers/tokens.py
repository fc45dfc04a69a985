"""Keep the bind's binder kubeconfig Secrets fresh before their tokens expire.

``bind`` stores a kubeconfig with a bounded TokenRequest token (a day by default) in each
consumer's Secret labelled ``klutch.anynines.com/binder-kubeconfig``, and RepositoryBindings reach
the Control Plane with it: without renewal every binding breaks when it expires. This controller
watches those Secrets and checks each one when its token becomes due (scheduled from the token's
own times, not polled), then requests a new token, writes it into the same kubeconfig (server and
CA stay as bind wrote them) and tells the manager, which restarts the bindings that use it.

The token is decoded without verifying its signature: we issued it, and its times only schedule
the renewal. Tokens never reach logs or Events. The Secret's YAML is read within the bounds of
``tenant_kubeconfig.load``; the renewer connects with the admin client only, and the kubeconfig
itself is checked strictly where a registration uses it (``reconciler.sync.connection``).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml
from joserfc import jws
from joserfc.errors import JoseError
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from klutch_gitops import tenant_kubeconfig
from klutch_gitops.apis import BINDER_KUBECONFIG_LABEL
from klutch_gitops.config import TokenRenewal
from klutch_gitops.consumer import binder_token
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import FIELD_MANAGER, Kube, KubeError
from klutch_gitops.kube.events import WARNING, EventRecorder
from klutch_gitops.kube.informer import Informer, object_key
from klutch_gitops.kube.resources import SECRETS
from klutch_gitops.kube.workqueue import WorkQueue, run_workers
from reconciler import metrics

log = logging.getLogger(__name__)

KEY = "kubeconfig"
# Re-check at least hourly: the queue's monotonic clock stands still while the host sleeps.
MAX_WAIT_SECONDS = 3600.0
INVALID_REASON = "BinderKubeconfigInvalid"
FIX = (
    f"bind again to rewrite the Secret, or remove its label {BINDER_KUBECONFIG_LABEL} "
    "if it is not a binder kubeconfig"
)

SecretKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class TokenTimes:
    issued: float  # iat, seconds since the epoch
    expires: float  # exp


def renewal_delay(now: float, issued: float, expires: float, renew_before: float | None) -> float:
    """Seconds until a token is due for renewal; 0 when it is due now.

    Due once less than ``renew_before`` of it is left — by default a third of its lifetime, which
    leaves room for retries while the old token still works.
    """
    threshold = (expires - issued) / 3 if renew_before is None else renew_before
    return max(0.0, expires - threshold - now)


def token_times(token: str) -> TokenTimes:
    """``iat`` and ``exp`` from a JWT's payload, unverified: they only schedule the renewal."""
    try:
        claims = json.loads(jws.extract_compact(token.encode()).payload)
    except (JoseError, ValueError):
        raise KlutchError("its token is not a JWT", FIX) from None
    times: list[Any] = [
        claims.get(name) if isinstance(claims, dict) else None for name in ("iat", "exp")
    ]
    if not all(isinstance(t, int | float) for t in times) or times[0] >= times[1]:
        raise KlutchError("its token has no valid iat and exp claims", FIX)
    return TokenTimes(float(times[0]), float(times[1]))


def binder_user(secret: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The Secret's kubeconfig and its current context's user, where the token is read and
    replaced."""
    encoded = (secret.get("data") or {}).get(KEY)
    if not encoded:
        raise KlutchError(f"it has no key {KEY!r}", FIX)
    try:
        kubeconfig = tenant_kubeconfig.load(base64.b64decode(encoded).decode())
    except (ValueError, KlutchError):  # no details: they could quote the token
        raise KlutchError(
            f"key {KEY!r} is not valid YAML of at most {tenant_kubeconfig.MAX_BYTES} bytes", FIX
        ) from None
    try:
        current = kubeconfig["current-context"]
        context = next(c["context"] for c in kubeconfig["contexts"] if c["name"] == current)
        user = next(u["user"] for u in kubeconfig["users"] if u["name"] == context["user"])
        if isinstance(user["token"], str):
            return kubeconfig, user
    except (KeyError, TypeError, StopIteration):
        pass
    raise KlutchError("its kubeconfig has no token for the current context's user", FIX)


class TokenRenewer:
    """Watches the binder kubeconfig Secrets and renews each token when it becomes due.

    The registrations that resolved the old token notice the renewal by their own watch of the
    Secrets (``Reconciler._on_binder_secret``), in whichever replica holds them.
    """

    def __init__(self, admin: Kube, settings: TokenRenewal) -> None:
        self.admin = admin
        self.settings = settings
        self.queue: WorkQueue[SecretKey] = WorkQueue()
        self.secrets = Informer(
            admin,
            SECRETS,
            lambda _event, obj: self.queue.add(object_key(obj)),
            label_selector=f"{BINDER_KUBECONFIG_LABEL}=true",
            name="binder-kubeconfigs",
        )
        self._reported: dict[SecretKey, str] = {}  # invalid Secret -> resourceVersion reported
        self.events = EventRecorder(admin)

    def start(self) -> TokenRenewer:
        self.secrets.start()
        run_workers(self.queue, self.check, 1, "binder-tokens")
        return self

    def stop(self) -> None:
        self.secrets.stop()
        self.queue.shutdown()

    def check(self, key: SecretKey) -> None:
        """Renew the Secret's token if it is due, otherwise check again when it will be."""
        secret = self.secrets.get(*key)
        if secret is None:  # deleted
            self._reported.pop(key, None)
            self._forget_expiry(key)
            return
        try:
            kubeconfig, user = binder_user(secret)
            times = token_times(user["token"])
        except KlutchError as error:
            self._forget_expiry(key)
            self._report_invalid(key, secret, error)
            return
        self._reported.pop(key, None)
        metrics.BINDER_TOKEN_EXPIRY.labels("/".join(key)).set(times.expires)
        delay = renewal_delay(time.time(), times.issued, times.expires, self.settings.renew_before)
        if delay > 0:
            self.queue.add_after(key, min(delay, MAX_WAIT_SECONDS))
            return
        self._renew(key, secret, kubeconfig, user)

    def _renew(
        self,
        key: SecretKey,
        secret: dict[str, Any],
        kubeconfig: dict[str, Any],
        user: dict[str, Any],
    ) -> None:
        namespace, name = key
        token = binder_token(self.admin, namespace, int(self.settings.lifetime))
        times = token_times(token)
        if renewal_delay(time.time(), times.issued, times.expires, self.settings.renew_before) == 0:
            # The API server caps lifetimes (--service-account-max-token-expiration): writing
            # a token that is due at once would renew it again and again.
            raise KlutchError(
                f"the Control Plane issued a token for {times.expires - times.issued:.0f}s, "
                "which is due for renewal at once",
                "set binderTokens.renewBefore below the Control Plane's maximum token lifetime",
            )
        user["token"] = token
        text = yaml.safe_dump(kubeconfig, sort_keys=False)
        body = {**secret, "data": {**secret["data"], KEY: base64.b64encode(text.encode()).decode()}}
        try:
            # An update of the version read: a token bind wrote meanwhile is not overwritten (409),
            # and a Secret deleted meanwhile is not recreated (404), as an apply would.
            client.CoreV1Api(self.admin.api).replace_namespaced_secret(
                name,
                namespace,
                body,  # type: ignore[arg-type]  # typed V1Secret; the client sends a dict as it is
                field_manager=FIELD_MANAGER,
            )
        except ApiException as error:
            if error.status in (404, 409):  # its watch event brings it back here if still due
                return
            raise KubeError.of(error) from None
        log.info(
            "binder token renewed",
            extra={
                "secret": f"{namespace}/{name}",
                "expires": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(times.expires)),
            },
        )

    def _forget_expiry(self, key: SecretKey) -> None:
        with contextlib.suppress(KeyError):  # never set for this Secret
            metrics.BINDER_TOKEN_EXPIRY.remove("/".join(key))

    def _report_invalid(self, key: SecretKey, secret: dict[str, Any], error: KlutchError) -> None:
        """Log and record a Warning Event once per version of the Secret; others carry on."""
        version = secret["metadata"].get("resourceVersion", "")
        if self._reported.get(key) == version:
            return
        self._reported[key] = version
        message = f"binder kubeconfig Secret {'/'.join(key)} cannot be renewed: {error.message}"
        log.warning(message, extra={"secret": "/".join(key), "fix": error.fix})
        self.events.record(SECRETS, secret, WARNING, INVALID_REASON, f"{message}; {error.fix}")
