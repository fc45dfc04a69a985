"""RepositoryBindings as rows: what ``klutch-gitops get repositories`` and ``klutch-bind status``
show of each (the status fields the reconciler writes, see reconciler/status.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from klutch_gitops.apis import REPOSITORY_BINDINGS, SUSPEND_ANNOTATION
from klutch_gitops.inspect.table import age, short
from klutch_gitops.kube.conditions import by_type

HEADERS = [
    "NAME", "READY", "REASON", "APPLIED", "CLAIMS", "REFUSED", "STATUS COMMIT", "SUSPENDED", "AGE"
]  # fmt: skip
WIDE = ["URL", "BRANCH", "PATH", "MESSAGE"]
KIND = f"{REPOSITORY_BINDINGS.kind}.{REPOSITORY_BINDINGS.group}".lower()  # for -o name
REASON_WIDTH = 24
MESSAGE_WIDTH = 120


def suspended(obj: Mapping[str, Any]) -> bool:
    """``spec.suspend``, or the suspend annotation "true" (the reconciler's contract)."""
    annotations = obj.get("metadata", {}).get("annotations") or {}
    return bool((obj.get("spec") or {}).get("suspend")) or (
        str(annotations.get(SUSPEND_ANNOTATION, "")).lower() == "true"
    )


def headers(wide: bool, all_namespaces: bool) -> list[str]:
    return [*(["NAMESPACE"] if all_namespaces else []), *HEADERS, *(WIDE if wide else [])]


def row(
    obj: Mapping[str, Any], wide: bool, all_namespaces: bool, now: dt.datetime | None = None
) -> list[str]:
    """One binding's cells, in the order of ``headers``."""
    meta, spec, status = obj["metadata"], obj.get("spec") or {}, obj.get("status") or {}
    ready = by_type(status).get("Ready") or {}
    cells = [
        meta["name"],
        ready.get("status", "Unknown"),
        short(ready.get("reason"), REASON_WIDTH),
        (status.get("lastAppliedCommit") or "")[:12],
        _count(status.get("claims")),
        _count(status.get("rejected")),
        (status.get("lastStatusCommit") or "")[:12],
        "true" if suspended(obj) else "false",  # kubectl prints booleans in lower case
        age(meta.get("creationTimestamp"), now),
    ]
    if all_namespaces:
        cells.insert(0, meta.get("namespace", ""))
    if wide:
        cells += [
            spec.get("url", ""),
            spec.get("branch", "main"),
            spec.get("path", ""),
            short(_message(status, ready), MESSAGE_WIDTH),
        ]
    return cells


def _count(value: Any) -> str:
    return str(value) if isinstance(value, int) else ""


def _message(status: Mapping[str, Any], ready: Mapping[str, Any]) -> str:
    """Ready's message, and the first refusal where one is listed (what to fix first)."""
    message = ready.get("message") or ""
    refusals = status.get("refusals") or []
    if refusals and isinstance(refusals[0], Mapping):
        first = refusals[0]
        message += f" [{first.get('file', '')}: {first.get('message', '')}]"
    return message.strip()
