"""What a tenant steers on its RepositoryBinding besides the spec: a reconcile request
(``REQUESTED_AT_ANNOTATION``, read the way Flux reads ``reconcile.fluxcd.io/requestedAt``: any new
value asks for a pass now, fluxcd/pkg ``runtime/predicates/reconcile_requested.go``), and how a
suspended registration (``spec.suspend`` or SUSPEND_ANNOTATION) resumes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from klutch_gitops.apis import REQUESTED_AT_ANNOTATION
from reconciler.registration import BindingRef, Origin


def requested_at(obj: Mapping[str, Any]) -> str | None:
    """The reconcile request's value, None without one."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(REQUESTED_AT_ANNOTATION)
    return None if value in (None, "") else str(value)


def resume_hint(origin: Origin, name: str) -> str:
    """How a person resumes registration ``name``: the CLI for a RepositoryBinding, else the
    config."""
    if isinstance(origin, BindingRef):
        return f"resume with: klutch-gitops resume {origin.namespace}/{origin.name}"
    return f"set suspend: false on repository {name} in the reconciler's config to resume"
