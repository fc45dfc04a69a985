"""Who may bind what: OIDC groups against each APIServiceExportTemplate.

A template names the groups that may bind it in an annotation; a template without one falls back
to the bind API's configured default. ``*`` admits every authenticated caller. The decision is a
pure function so every rule is unit-tested; refusals carry the reason the caller sees (403).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ALLOWED_GROUPS_ANNOTATION = "gitops.klutch.anynines.com/allowed-groups"
EVERYONE = "*"


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str


def allowed_groups(template: Mapping[str, Any], default: Sequence[str]) -> tuple[str, ...]:
    """The groups a template admits: its annotation (comma-separated), else the default."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(ALLOWED_GROUPS_ANNOTATION)
    if raw is None:
        return tuple(default)
    return tuple(group.strip() for group in raw.split(",") if group.strip())


def may_bind(
    template: Mapping[str, Any], api: str, groups: Iterable[str], default: Sequence[str]
) -> Decision:
    admitted = allowed_groups(template, default)
    caller = set(groups)
    if EVERYONE in admitted or caller & set(admitted):
        return Decision(True, f"{api}: allowed")
    if not admitted:
        return Decision(
            False,
            f"{api}: nobody may bind it (no {ALLOWED_GROUPS_ANNOTATION} "
            "annotation on its template and no default in the bind API)",
        )
    return Decision(
        False,
        f"{api}: only members of {', '.join(sorted(admitted))} may bind it; "
        f"your groups: {', '.join(sorted(caller)) or 'none'}",
    )
