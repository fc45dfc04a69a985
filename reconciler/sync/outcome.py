"""What one sync pass did, typed: the documents the loader refused and what the stages found.

A stage finds one of three things, each its own type: ``Failed`` (a change Git asks for was not
made: a cluster refused the apply, an object or CRD belongs to someone else, a deletion-protected
object left Git), ``Held`` (a deletion-protected object is being deleted and our finalizer holds
it) and ``Foreign`` (Klutch's konnector serves the claim's kind for another consumer namespace).
The loader's refused documents are ``Rejection``s. The report in Git, the RepositoryBinding status
and the logs read all four through ``Problem``: where, what and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from reconciler.manifests import Identity, Rejection

SHOWN_REFUSALS = 5  # how many refusals a status lists; reconcile.yaml in Git has them all


class Problem(Protocol):
    """What a person is shown of any problem of a pass (a ``Rejection`` is one)."""

    @property
    def file(self) -> str: ...
    @property
    def document(self) -> int | None: ...
    @property
    def field(self) -> str | None: ...
    @property
    def identity(self) -> Identity | None: ...
    @property
    def message(self) -> str: ...
    @property
    def fix(self) -> str: ...
    def as_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True, kw_only=True)
class Found:
    """What a stage found, reported where a person looks: file, document, object, fix."""

    file: str
    message: str
    fix: str
    document: int | None = None
    identity: Identity | None = None

    @property
    def field(self) -> str | None:
        """The field the problem is about; none for a stage's."""
        return None

    def as_dict(self) -> dict[str, Any]:
        """The report's entry, in the shape of a refused document's."""
        return Rejection(
            self.file, self.message, self.fix, self.document, self.field, self.identity
        ).as_dict()


@dataclass(frozen=True, kw_only=True)
class Failed(Found):
    """A change Git asks for that a stage did not make; the stage tries again next pass."""


@dataclass(frozen=True, kw_only=True)
class Held(Found):
    """A deletion-protected App object being deleted, held by our finalizer with its Control
    Plane copy kept (``prune.finalize``): its ``Ready`` says False."""

    identity: Identity

    @property
    def field(self) -> str:
        return "metadata.deletionTimestamp"  # what started it: someone deleted the object


@dataclass(frozen=True, kw_only=True)
class Foreign(Found):
    """A claim in Git of a kind Klutch's konnector serves for another consumer namespace: not
    applied, pruned or mirrored while that lasts (``konnector.refuse_foreign``)."""

    identity: Identity
    document: int


F = TypeVar("F", bound=Found)


def only(kind: type[F], found: Iterable[Found]) -> tuple[F, ...]:
    """The problems of one type among ``found``, in their order."""
    return tuple(p for p in found if isinstance(p, kind))


def documents(refusals: Iterable[Problem]) -> int:
    """How many documents ``refusals`` refuse (a whole refused file counts once), not how many
    problems: one document can have several."""
    return len({(r.file, r.document) for r in refusals})


@dataclass(frozen=True)
class PassOutcome:
    commit: str  # the Git commit whose desired state the pass applied
    claims: int  # claims mirrored to the Control Plane
    refused: tuple[Rejection, ...] = ()  # the documents the loader refused: Git needs a fix
    found: tuple[Found, ...] = ()  # what the stages found, in the order found: looked at again

    @property
    def failed(self) -> tuple[Failed, ...]:
        return only(Failed, self.found)

    @property
    def held(self) -> tuple[Held, ...]:
        return only(Held, self.found)

    @property
    def foreign(self) -> tuple[Foreign, ...]:
        return only(Foreign, self.found)

    @property
    def refusals(self) -> tuple[Problem, ...]:
        """Every problem of the pass, the loader's first."""
        return (*self.refused, *self.found)

    @property
    def refused_documents(self) -> int:
        """The documents with a problem, the loader's or a stage's (``documents``)."""
        return documents(self.refusals)

    def first_refusals(self) -> list[dict[str, Any]]:
        return [r.as_dict() for r in self.refusals[:SHOWN_REFUSALS]]
