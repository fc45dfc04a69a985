"""Pull-request review: what merging a branch would do to a repository's claims, and whether it
may.

Pure decisions over two desired states (the base and the merge result, as the reconciler's own
loader reads them): which claims are created, changed or deleted, the field-level diff, which
changes are destructive, their order, and which findings fail the plan. Cluster checks (the
Control Plane's dry-run, the live App object's deletion protection) are made elsewhere and handed
in as ``Check`` values.

Destructive (listed first, in this order):
1. deleting a claim, except a Restore (its record only): an ``*Instance`` takes its data with
   it, a Backup its dump, a ServiceBinding its credentials, any other kind whatever it made;
2. creating a Restore, or changing its spec: the instance's data is overwritten by the backup;
3. changing the spec of an ``*Instance`` outside Crossplane's bookkeeping fields (plan, service,
   parameters, expose, compositionRef, ...): the service restarts or is rebuilt; changing a
   ServiceBinding's ``instanceRef`` or ``serviceInstanceType``: its credentials are replaced.
Then creations, other changes, and deletions of Restores. Labels and annotations never restart
anything.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from klutch_gitops.apis import DELETION_PROTECTION
from reconciler.manifests import Claim, Identity, Rejection
from reconciler.sync import objects
from reconciler.sync.desired import DesiredState

# Claim spec fields Crossplane reads for bookkeeping only: changing them restarts nothing.
BOOKKEEPING_SPEC_FIELDS = frozenset(
    {
        "writeConnectionSecretToRef",
        "publishConnectionDetailsTo",
        "compositeDeletePolicy",
        "compositionUpdatePolicy",
        "resourceRef",
    }
)
BINDING_TARGET_FIELDS = frozenset({"instanceRef", "serviceInstanceType"})
_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


class Action(StrEnum):
    CREATE = "create"
    CHANGE = "change"
    DELETE = "delete"


class Outcome(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    SKIPPED = "skipped"


class _Absent:
    """The side of a field change where the field does not exist."""

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


@dataclass(frozen=True)
class FieldChange:
    parts: tuple[str | int, ...]
    old: Any = ABSENT
    new: Any = ABSENT

    @property
    def path(self) -> str:
        return field_path(self.parts)

    @property
    def op(self) -> str:
        if self.old is ABSENT:
            return "add"
        return "remove" if self.new is ABSENT else "change"


@dataclass(frozen=True)
class Check:
    """One validation of a change: ``dry-run`` or ``deletion-protection``."""

    name: str
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True)
class Change:
    action: Action
    identity: Identity
    api_version: str
    file: str  # where the document is in the merge result (where it was, for a deletion)
    fields: tuple[FieldChange, ...]
    destructive: str | None  # why, when the change loses data or interrupts a service
    rank: int  # the order among changes: lower comes first
    checks: tuple[Check, ...] = ()

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.outcome is Outcome.FAILED)


@dataclass(frozen=True)
class Held:
    """A claim the merge removes from Git that a refused document keeps from being deleted."""

    identity: Identity
    file: str
    reason: str


@dataclass(frozen=True)
class Failure:
    binding: str
    subject: str  # the object, or the file and document
    message: str
    fix: str


@dataclass(frozen=True)
class BindingPlan:
    """The plan of one binding: one folder of the repository and the namespaces it maps to."""

    name: str
    path: str
    changes: tuple[Change, ...]  # in plan order
    refused: tuple[Rejection, ...]  # refused documents the merge introduces: failures
    still_refused: tuple[Rejection, ...]  # refused on the base already: reported, not failed
    held: tuple[Held, ...] = ()
    notes: tuple[str, ...] = ()  # how it was validated, what could not be checked

    def failures(self) -> list[Failure]:
        found = [
            Failure(self.name, _rejection_subject(r), _rejection_message(r), r.fix)
            for r in self.refused
        ]
        for change in self.changes:
            for check in change.failed:
                found.append(
                    Failure(
                        self.name,
                        f"{change.action} {change.identity} ({change.file})",
                        check.message,
                        CHECK_FIXES.get(check.name, "see the message"),
                    )
                )
        return found


@dataclass(frozen=True)
class Plan:
    base: str  # commit
    head: str  # commit
    merge: str  # the tree of the merge result
    bindings: tuple[BindingPlan, ...]
    base_ref: str = ""
    head_ref: str = ""

    def failures(self) -> list[Failure]:
        return [f for binding in self.bindings for f in binding.failures()]

    @property
    def exit_code(self) -> int:
        """0: clean; 1: the plan has failures (kubectl's convention for a refused request)."""
        return 1 if self.failures() else 0

    def counts(self) -> dict[str, int]:
        changes = [c for b in self.bindings for c in b.changes]
        return {
            **{action.value: sum(c.action is action for c in changes) for action in Action},
            "destructive": sum(c.destructive is not None for c in changes),
            "failures": len(self.failures()),
        }


CHECK_FIXES = {
    "dry-run": "Change the claim so the Control Plane accepts it; the message names the rule.",
    "deletion-protection": (
        f"Keep the claim in Git, or first remove the {DELETION_PROTECTION} annotation "
        "(from Git and from the live App claim) in a change of its own."
    ),
}


def field_path(parts: Iterable[str | int]) -> str:
    """``spec.parameters.maxConnections``, ``metadata.labels["app.kubernetes.io/name"]``,
    ``spec.items[2]``: keys that are not plain names are quoted."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _PLAIN_KEY.fullmatch(part):
            path += f".{part}" if path else part
        else:
            path += '["' + part.replace("\\", "\\\\").replace('"', '\\"') + '"]'
    return path


def reviewed(body: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a review compares: labels, annotations and every top-level field but apiVersion,
    kind, metadata and status (kind, name and namespace are the identity)."""
    if body is None:
        return {}
    meta = body.get("metadata") or {}
    view: dict[str, Any] = {k: meta[k] for k in ("labels", "annotations") if meta.get(k)}
    view = {"metadata": view} if view else {}
    view.update(
        (k, v) for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "status")
    )
    return view


def diff(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[FieldChange]:
    """The field-level changes from ``old`` to ``new`` (None: the object does not exist).

    Leaves are compared; lists by index. Empty mappings and lists count as absent (the API
    server drops them). A changed apiVersion comes first, changed and added fields follow in
    ``new``'s order, then removed ones.
    """
    changes = []
    if old is not None and new is not None and old.get("apiVersion") != new.get("apiVersion"):
        changes.append(FieldChange(("apiVersion",), old.get("apiVersion"), new.get("apiVersion")))
    before, after = _leaves(reviewed(old)), _leaves(reviewed(new))
    changes += [
        FieldChange(parts, before.get(parts, ABSENT), value)
        for parts, value in after.items()
        if parts not in before or not _same(before[parts], value)
    ]
    changes += [FieldChange(parts, value) for parts, value in before.items() if parts not in after]
    return changes


def _same(old: Any, new: Any) -> bool:
    """Equal and of one type: YAML's ``1``, ``1.0`` and ``true`` are different values."""
    return type(old) is type(new) and old == new


def _leaves(value: Any, parts: tuple[str | int, ...] = ()) -> dict[tuple[str | int, ...], Any]:
    if isinstance(value, Mapping):
        found: dict[tuple[str | int, ...], Any] = {}
        for key, sub in value.items():
            found.update(_leaves(sub, (*parts, str(key))))
        return found
    if isinstance(value, list):
        found = {}
        for index, sub in enumerate(value):
            found.update(_leaves(sub, (*parts, index)))
        return found
    return {parts: value}


def is_instance(kind: str) -> bool:
    """The data-service kinds (PostgresqlInstance, KeyvalueInstance, ...): they hold data."""
    return kind.endswith("Instance")


def classify(action: Action, kind: str, fields: Sequence[FieldChange]) -> tuple[int, str | None]:
    """(rank, why it is destructive or None), by the rule in this module's docstring."""
    spec_keys = {str(f.parts[1]) for f in fields if len(f.parts) > 1 and f.parts[0] == "spec"}
    if action is Action.DELETE:
        if kind == "Restore":
            return 5, None
        if is_instance(kind):
            return 0, "deletes the data service and its data"
        return 0, {
            "Backup": "deletes the backup",
            "ServiceBinding": "revokes the binding's credentials",
        }.get(kind, f"deletes what the {kind} made")
    if kind == "Restore" and (action is Action.CREATE or spec_keys):
        return 1, "overwrites the instance's data with the backup"
    if action is Action.CHANGE:
        restarting = sorted(spec_keys - BOOKKEEPING_SPEC_FIELDS) if is_instance(kind) else []
        if restarting:
            return 2, f"restarts the service ({_spec_fields(restarting)})"
        moved = sorted(spec_keys & BINDING_TARGET_FIELDS) if kind == "ServiceBinding" else []
        if moved:
            return 2, f"replaces the credentials ({_spec_fields(moved)})"
        return 4, None
    return 3, None


def _spec_fields(keys: Iterable[str]) -> str:
    return ", ".join(f"spec.{key}" for key in keys)


def compare(
    name: str, path: str, base: DesiredState, head: DesiredState, notes: Sequence[str] = ()
) -> BindingPlan:
    """What merging turns ``base`` into ``head`` means for one binding, without cluster checks.

    A claim that leaves Git is deleted unless a refused document of ``head`` still names it, or
    it came from a file that no longer loads: the reconciler holds those, and so does the plan.
    """
    before = {c.identity: c for c in base.claims}
    after = {c.identity: c for c in head.claims}
    changes = [
        change
        for ident, claim in after.items()
        if (change := _change(claim, before.get(ident), deleted=False)).fields
        or ident not in before
    ]
    named = {r.identity: r for r in head.rejections if r.identity}
    held_files = [r for r in head.rejections if r.identity is None]
    held: list[Held] = []
    for ident, claim in before.items():
        if ident in after:
            continue
        holder = named.get(ident) or next(
            (r for r in held_files if objects.within(claim.location.file, r.file)), None
        )
        if holder is None:
            changes.append(_change(claim, claim, deleted=True))
        else:
            reason = f"kept: {holder.file} is refused ({holder.message})"
            held.append(Held(ident, claim.location.file, reason))
    known = {_rejection_key(r) for r in base.rejections}
    return BindingPlan(
        name=name,
        path=path,
        changes=tuple(order(changes)),
        refused=tuple(r for r in head.rejections if _rejection_key(r) not in known),
        still_refused=tuple(r for r in head.rejections if _rejection_key(r) in known),
        held=tuple(held),
        notes=tuple(notes),
    )


def _change(claim: Claim, old: Claim | None, *, deleted: bool) -> Change:
    """``claim`` as it is in the merge result (or was, when ``deleted``) against ``old``."""
    action = Action.DELETE if deleted else Action.CHANGE if old else Action.CREATE
    fields = tuple(diff(old.body if old else None, None if deleted else claim.body))
    rank, destructive = classify(action, claim.identity.kind, fields)
    return Change(
        action, claim.identity, claim.api_version, claim.location.file, fields, destructive, rank
    )


def order(changes: Iterable[Change]) -> list[Change]:
    """Destructive first (deletions, restores, restarts), then creations, changes, the rest."""
    return sorted(
        changes,
        key=lambda c: (c.rank, c.identity.kind, c.identity.namespace, c.identity.name),
    )


def with_checks(plan: BindingPlan, checks: Mapping[Identity, Sequence[Check]]) -> BindingPlan:
    """The plan with each change's cluster checks attached."""
    return replace(
        plan,
        changes=tuple(
            replace(c, checks=(*c.checks, *checks.get(c.identity, ()))) for c in plan.changes
        ),
    )


def deletion_check(base_body: Mapping[str, Any], live_app: Mapping[str, Any] | None) -> Check:
    """A deletion of a claim that Git or the live App claim marks deletion-protected fails, as
    the reconciler would refuse it."""
    where = [
        label
        for label, obj in (("in Git", base_body), ("on the live App claim", live_app))
        if obj is not None and objects.deletion_protected(obj)
    ]
    if where:
        return Check(
            "deletion-protection",
            Outcome.FAILED,
            f'deletion-protected ({DELETION_PROTECTION}: "true" {" and ".join(where)}); '
            "the reconciler would refuse to delete it",
        )
    return Check("deletion-protection", Outcome.PASSED)


def _rejection_key(rejection: Rejection) -> tuple[str, str, str | None, str]:
    """Same refusal on both sides: the document index may shift when others are added."""
    return (rejection.file, str(rejection.identity or ""), rejection.field, rejection.message)


def _rejection_subject(rejection: Rejection) -> str:
    where = rejection.file
    if rejection.document is not None:
        where += f" (document {rejection.document + 1})"
    return f"{rejection.identity} in {where}" if rejection.identity else where


def _rejection_message(rejection: Rejection) -> str:
    return f"{rejection.field}: {rejection.message}" if rejection.field else rejection.message
