"""Plan only what changed: the claims whose apply planning can be skipped because nothing it
reads changed since a plan found both of their copies in sync.

Apply planning (``apply.plan``) is pure over what it reads: the claim, its export, its App
object, the namespace mapping and its Control Plane copy. A pass caused by a push changes a few
claims (the incremental loader keeps every other ``Claim`` object as it was) and no cluster
object, so remembering, per identity, the inputs of the last in-sync verdict spares building and
comparing two bodies per unchanged claim. Objects are told apart by their resourceVersion (any
write changes it); one without it is always planned. Only in-sync verdicts are remembered: a
claim that needs a write, or whose write was refused, is planned every pass, as before.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from reconciler.manifests import Claim, Identity
from reconciler.sync import objects
from reconciler.sync.apply import Source, plan
from reconciler.sync.view import View

Inputs = tuple[Hashable, ...]
Seen = tuple[Claim, Inputs]  # a claim and what its plan read


class InSync:
    """One repository's last in-sync verdicts, kept between passes."""

    def __init__(self) -> None:
        self._seen: dict[Identity, Seen] = {}  # the in-sync verdicts' inputs
        self._last: dict[Identity, Seen] = {}  # every claim's inputs, last pass
        self.skipped = 0  # claims the last pass did not plan

    def to_plan(
        self, view: View, claims: tuple[Claim, ...], source: Source, exports: Hashable
    ) -> tuple[Claim, ...]:
        """The claims ``apply_claims`` must plan, in order: all but those in sync as last seen.
        ``exports``: changes whenever the exports do (their resourceVersions).

        A claim whose inputs did not move since the last pass but has no verdict yet is planned
        here once (its verdict kept when in sync); one whose inputs moved is left to the apply."""
        seen: dict[Identity, Seen] = {}
        last: dict[Identity, Seen] = {}
        todo: list[Claim] = []
        for claim in claims:
            inputs = _inputs(view, claim, source)
            if inputs is None:
                todo.append(claim)
                continue
            now = (claim, (exports, *inputs))
            last[claim.identity] = now
            if _same(self._seen.get(claim.identity), now) or (
                _same(self._last.get(claim.identity), now) and plan(view, claim, source) is None
            ):
                seen[claim.identity] = now
            else:
                todo.append(claim)
        self._seen, self._last = seen, last
        self.skipped = len(claims) - len(todo)
        return tuple(todo)


def _same(before: Seen | None, now: Seen) -> bool:
    """The same claim (the very object, or an equal one: adoption makes new ones) and inputs."""
    return (
        before is not None and before[1] == now[1] and (before[0] is now[0] or before[0] == now[0])
    )


def _inputs(view: View, claim: Claim, source: Source) -> Inputs | None:
    """What ``apply.plan`` reads besides the claim and its export, by version; None when an
    object has no resourceVersion to tell its versions apart."""
    ident = claim.identity
    export = view.export_of(claim)
    live = view.app_claim(export, ident.namespace, ident.name)
    target = view.mapping.get(ident.namespace)
    upstream = view.cp_claim(export, target, ident.name) if target is not None else None
    versions = [_version(obj) for obj in (live, upstream)]
    if "" in versions:
        return None
    return (source.repository, source.path, source.external, target, *versions)


def _version(obj: dict[str, Any] | None) -> str | None:
    """The object's resourceVersion; None when there is no object, "" when it has none."""
    if obj is None:
        return None
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


class Quiet:
    """The mirrored claims whose status and Secrets copy (``observe.mirror``) wrote nothing last
    time, with what it read then: while none of it changes, mirroring them again writes nothing
    again, so a pass passes over them. Only a mirroring that wrote nothing is remembered."""

    def __init__(self) -> None:
        self._exports: Hashable = None
        self._seen: dict[Identity, Seen] = {}
        self._next: dict[Identity, Seen] = {}
        self.skipped = 0  # claims the last pass passed over

    def under(self, exports: Hashable) -> Quiet:
        """Start a pass under the exports of this version (their schemas decide the marks)."""
        if exports != self._exports:
            self._exports, self._seen = exports, {}
        self._next, self.skipped = {}, 0
        return self

    def inputs(self, view: View, claim: Claim, extra: Inputs) -> Inputs | None:
        """What mirroring ``claim`` reads, by version; None when an object has none."""
        ident = claim.identity
        export = view.export_of(claim)
        live = view.app_claim(export, ident.namespace, ident.name)
        target = view.mapping.get(ident.namespace)
        if live is None or target is None:
            return None  # nothing is mirrored: cheap
        copy = view.cp_claim(export, target, ident.name)
        synced = view.cp_secrets_synced(target)
        secrets = (
            [
                (
                    _version(view.cp_secret(target, name)),
                    _version(view.secret_copy(ident.namespace, name)),
                )
                for name in sorted(objects.credential_secret_names(claim.body))
            ]
            if synced
            else []
        )
        versions = [_version(live), _version(copy), *(v for pair in secrets for v in pair)]
        if "" in versions:
            return None
        return (target, synced, *versions, *extra)

    def unchanged(self, claim: Claim, inputs: Inputs | None) -> bool:
        """Whether mirroring ``claim`` would read what it read when it last wrote nothing."""
        if inputs is None or not _same(self._seen.get(claim.identity), (claim, inputs)):
            return False
        self._next[claim.identity] = (claim, inputs)
        self.skipped += 1
        return True

    def seen(self, claim: Claim, inputs: Inputs | None) -> None:
        """Remember a mirroring that wrote nothing (``inputs``), or forget one that wrote."""
        if inputs is not None:
            self._next[claim.identity] = (claim, inputs)

    def done(self) -> None:
        """The pass mirrored every claim: what it remembered replaces the last pass's."""
        self._seen, self._next = self._next, {}
