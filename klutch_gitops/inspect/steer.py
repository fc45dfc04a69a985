"""``reconcile``, ``suspend`` and ``resume``: merge patches of the RepositoryBinding's annotations
only, all a tenant may change of it (catalog/policies/repositorybinding-steering.yaml), and the
wait for the reconciler's answer in ``status.lastHandledReconcileAt`` (Flux's requestedAt protocol:
fluxcd/pkg/apis/meta/annotations.go, ReconcileRequestAnnotation and ReconcileAnnotationValue)."""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from klutch_gitops.apis import REPOSITORY_BINDINGS, REQUESTED_AT_ANNOTATION, SUSPEND_ANNOTATION
from klutch_gitops.errors import KlutchError
from klutch_gitops.inspect.access import CALL_ERRORS, refused
from klutch_gitops.inspect.repositories import suspended
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.conditions import by_type

_DNS_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


def parse_repo(text: str, namespace: str, explicit_namespace: bool = False) -> tuple[str, str]:
    """``NAME`` (in ``namespace``) or ``NAMESPACE/NAME``; ``(namespace, name)``."""
    parts = text.split("/")
    if len(parts) > 2 or not all(_DNS_NAME.match(part) for part in parts):
        raise KlutchError(
            f"REPO {text!r} is not NAME or NAMESPACE/NAME of a RepositoryBinding",
            "pass e.g. team or cluster-abc/team (lower case, digits, '-' and '.')",
        )
    if len(parts) == 1:
        return namespace, text
    if explicit_namespace and parts[0] != namespace:
        raise KlutchError(
            f"REPO {text} names namespace {parts[0]}, but -n says {namespace}",
            "give the namespace once: NAMESPACE/NAME or -n NAMESPACE NAME",
        )
    return parts[0], parts[1]


def requested_at(now: dt.datetime | None = None) -> str:
    """RFC 3339 with microseconds: two requests in one second still differ."""
    moment = now or dt.datetime.now(dt.UTC)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def annotations_patch(values: Mapping[str, str | None]) -> dict[str, Any]:
    """A JSON merge patch of ``metadata.annotations`` alone; None removes one (RFC 7386)."""
    return {"metadata": {"annotations": dict(values)}}


def live(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The binding, or a KlutchError naming it when it is absent or unreadable."""
    try:
        found = kube.get(REPOSITORY_BINDINGS, namespace, name)
    except CALL_ERRORS as error:
        raise refused(error, "get", REPOSITORY_BINDINGS, namespace) from None
    if found is None:
        raise KlutchError(
            f"RepositoryBinding {name} not found in namespace {namespace}",
            "list them with `klutch-gitops get -n NAMESPACE` (or -A) and check the name",
        )
    return found


def annotate(
    kube: Kube, namespace: str, name: str, values: Mapping[str, str | None]
) -> dict[str, Any]:
    try:
        return kube.patch(REPOSITORY_BINDINGS, namespace, name, annotations_patch(values))
    except CALL_ERRORS as error:
        raise refused(error, "patch", REPOSITORY_BINDINGS, namespace) from None


def request_reconcile(kube: Kube, namespace: str, name: str) -> str:
    """Ask for a pass now; a suspended binding is refused, as ``flux reconcile`` refuses."""
    if suspended(live(kube, namespace, name)):
        raise KlutchError(
            f"RepositoryBinding {namespace}/{name} is suspended",
            f"resume it first: klutch-gitops resume {namespace}/{name}",
        )
    value = requested_at()
    annotate(kube, namespace, name, {REQUESTED_AT_ANNOTATION: value})
    return value


def suspend(kube: Kube, namespace: str, name: str) -> None:
    live(kube, namespace, name)
    annotate(kube, namespace, name, {SUSPEND_ANNOTATION: "true"})


def resume(kube: Kube, namespace: str, name: str) -> str:
    """Remove the suspend annotation and request a pass in the same patch (``flux resume``)."""
    live(kube, namespace, name)
    value = requested_at()
    annotate(kube, namespace, name, {SUSPEND_ANNOTATION: None, REQUESTED_AT_ANNOTATION: value})
    return value


def wait_handled(
    kube: Kube,
    namespace: str,
    name: str,
    value: str,
    timeout: float,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """The binding once ``status.lastHandledReconcileAt`` is ``value``; KlutchError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        obj = live(kube, namespace, name)
        handled = (obj.get("status") or {}).get("lastHandledReconcileAt")
        if handled == value:
            return obj
        if time.monotonic() >= deadline:
            raise KlutchError(
                f"RepositoryBinding {namespace}/{name} did not answer the request {value} "
                f"within {timeout:g}s (lastHandledReconcileAt: {handled or 'none'})",
                "check that the reconciler runs and follows it, or wait longer with --timeout",
            )
        sleep(0.5)


def check_ready(obj: Mapping[str, Any]) -> str:
    """``ready_line`` of a binding whose answered pass did not fail; KlutchError when its Ready
    is False, so that ``reconcile`` and ``resume`` exit 1 as ``flux reconcile`` does."""
    line = ready_line(obj)
    if (by_type(obj.get("status")).get("Ready") or {}).get("status") == "False":
        meta = obj["metadata"]
        raise KlutchError(
            f"RepositoryBinding {meta['namespace']}/{meta['name']} was reconciled and is not "
            f"Ready: {line}",
            f"see 'klutch-gitops get -n {meta['namespace']} -o wide' and the conditions in "
            "'-o yaml'; fix Git or the referenced Secret, and reconcile again",
        )
    return line


def ready_line(obj: Mapping[str, Any]) -> str:
    """``Ready=True Synced: message`` for the person who asked."""
    ready = by_type(obj.get("status")).get("Ready")
    if not ready:
        return "Ready: not reported yet"
    text = f"Ready={ready.get('status')} {ready.get('reason', '')}"
    return f"{text}: {ready['message']}" if ready.get("message") else text
