"""What each forge sends: its headers and event names, where a payload names its repository, how a
request is signed, and how a pull (GitLab: merge) request reads."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.triggers.signatures import Verify, verify_hmac, verify_token
from reconciler.triggers.webhook_events import PullRequestEvent, WebhookError


@dataclass(frozen=True)
class Provider:
    event_header: str
    delivery_header: str
    push_event: str
    pull_event: str
    repository_field: str
    url_fields: tuple[str, ...]
    verify: Verify
    pull_request: Callable[[str, Mapping[str, Any], frozenset[str]], PullRequestEvent | str]


def _field(data: Mapping[str, Any], path: str, kind: type) -> Any:
    """``data``'s value at the dotted ``path``, of type ``kind``; a 400 naming the path if not."""
    value: Any = data
    for key in path.split("."):
        value = value.get(key) if isinstance(value, Mapping) else None
    if not isinstance(value, kind) or isinstance(value, bool) or value in ("", None):
        raise WebhookError(400, f"pull request payload lacks {kind.__name__} field {path!r}")
    return value


# GitHub says synchronize, Gitea synchronized. An edit is planned only when it moved the base.
_PULL_ACTIONS = {"opened", "reopened", "synchronize", "synchronized", "edited"}


def _github_pull(
    provider: str, payload: Mapping[str, Any], urls: frozenset[str]
) -> PullRequestEvent | str:
    """GitHub's and Gitea's ``pull_request`` event (Gitea copies GitHub's shape)."""
    action = payload.get("action")
    if action not in _PULL_ACTIONS:
        return f"pull request action {str(action)[:50]!r} needs no plan"
    if action == "edited" and not {"base", "ref"} & set(payload.get("changes") or {}):
        return "a pull request edit that keeps its base branch needs no new plan"
    number = _field(payload, "pull_request.number", int)
    return PullRequestEvent(
        provider,
        urls,
        frozenset(),
        number,
        base=_field(payload, "pull_request.base.ref", str),
        head=_field(payload, "pull_request.head.ref", str),
        head_sha=_field(payload, "pull_request.head.sha", str),
        head_ref=f"refs/pull/{number}/head",
    )


def _gitlab_merge_request(
    provider: str, payload: Mapping[str, Any], urls: frozenset[str]
) -> PullRequestEvent | str:
    """GitLab's Merge Request Hook; an update is planned only when it brought commits
    (``oldrev``) or a new target branch."""
    attributes = _field(payload, "object_attributes", dict)
    action = attributes.get("action")
    if action not in ("open", "reopen", "update"):
        return f"merge request action {str(action)[:50]!r} needs no plan"
    if action == "update" and not (
        attributes.get("oldrev") or "target_branch" in (payload.get("changes") or {})
    ):
        return "a merge request update without new commits or target branch needs no new plan"
    iid = _field(payload, "object_attributes.iid", int)
    return PullRequestEvent(
        provider,
        urls,
        frozenset(),
        iid,
        base=_field(payload, "object_attributes.target_branch", str),
        head=_field(payload, "object_attributes.source_branch", str),
        head_sha=_field(payload, "object_attributes.last_commit.id", str),
        head_ref=f"refs/merge-requests/{iid}/head",
        project_path=_field(payload, "project.path_with_namespace", str),
    )


# Delivery ids: GitHub "X-GitHub-Delivery" (one GUID per event, shared by every hook it reaches:
# github/docs content/webhooks/webhook-events-and-payloads.md, "Delivery headers"), Gitea
# "X-Gitea-Delivery" (docs.gitea.com/usage/webhooks), GitLab "Idempotency-Key" (the same on a
# retry of one event; GitLab 17.4, gitlab-org/gitlab!160952).
PROVIDERS: Mapping[str, Provider] = {
    "github": Provider(
        "X-GitHub-Event",
        "X-GitHub-Delivery",
        "push",
        "pull_request",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        verify_hmac("X-Hub-Signature-256", "sha256="),
        _github_pull,
    ),
    "gitlab": Provider(
        "X-Gitlab-Event",
        "Idempotency-Key",
        "Push Hook",
        "Merge Request Hook",
        "project",
        ("git_http_url", "git_ssh_url", "web_url"),
        verify_token,
        _gitlab_merge_request,
    ),
    "gitea": Provider(
        "X-Gitea-Event",
        "X-Gitea-Delivery",
        "push",
        "pull_request",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        verify_hmac("X-Gitea-Signature", ""),
        _github_pull,
    ),
}
