"""What one sync pass did: the figures a registration's status reports (RepositoryBinding)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from klutch_gitops.manifests import Rejection

SHOWN_REFUSALS = 5  # how many refusals a status lists; reconcile.yaml in Git has them all


def documents(refusals: Iterable[Rejection]) -> int:
    """How many documents ``refusals`` refuse (a whole refused file counts once), not how many
    problems: one document can have several."""
    return len({(r.file, r.document) for r in refusals})


@dataclass(frozen=True)
class PassOutcome:
    commit: str  # the Git commit whose desired state the pass applied
    claims: int  # claims mirrored to the Control Plane
    rejections: tuple[Rejection, ...]  # the documents the loader refused: Git needs a fix
    # what the stages found (apply, prune, adoption, konnector, finalize): retried next pass
    stage_problems: tuple[Rejection, ...] = ()

    @property
    def refusals(self) -> tuple[Rejection, ...]:
        """Every problem of the pass, the loader's first."""
        return (*self.rejections, *self.stage_problems)

    @property
    def refused(self) -> int:
        """Refused documents, not problems (``documents``)."""
        return documents(self.refusals)

    def first_refusals(self) -> list[dict]:
        return [r.as_dict() for r in self.refusals[:SHOWN_REFUSALS]]
