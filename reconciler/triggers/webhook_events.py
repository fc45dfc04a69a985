"""What a verified webhook request comes down to: a branch that moved, or a pull request to plan."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

Candidates = Callable[[frozenset[str]], Sequence[tuple[str, bytes]]]
"""Given the normalized URLs a payload names: (registration, webhook secret) for every secret of
every registration of those URLs."""


@dataclass(frozen=True)
class PushEvent:
    provider: str
    urls: frozenset[str]  # normalized (klutch_gitops.urls.normalize_repo_url)
    registrations: frozenset[str]  # whose own webhook secret verified the request
    branch: str
    after: str | None
    delivery: str = ""  # the forge's delivery id, when it sent one
    digest: str = ""  # SHA-256 of the body: what the signature covers


@dataclass(frozen=True)
class PullRequestEvent:
    """A pull (GitLab: merge) request whose head commit is to be planned against its base."""

    provider: str
    urls: frozenset[str]  # normalized, of the repository the request merges into
    registrations: frozenset[str]  # whose own webhook secret verified the request
    number: int  # GitLab: the merge request's iid
    base: str  # the branch it merges into
    head: str  # its own branch, for messages
    head_sha: str
    head_ref: str  # the ref of the base repository holding the head, for forks too
    # GitLab's path_with_namespace: where the project's path starts within the registered URL
    # (GitLab may live under a relative URL root); None for GitHub and Gitea (OWNER/REPO)
    project_path: str | None = None
    delivery: str = ""
    digest: str = ""


Event = PushEvent | PullRequestEvent


class WebhookError(Exception):
    """A request refused; ``status_code`` and ``message`` go back to the sender."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
