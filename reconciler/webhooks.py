"""Webhooks from GitHub, GitLab and Gitea: verified, reduced to "this branch moved" (pushes) or
"plan this pull request" (pull and merge requests).

A webhook is only a trigger: the reconciler fetches and verifies the repository itself, so the
payload is read for the repository's URLs, the branches, the commit and (pull requests) where the
forge's API is, nothing else. Every request must be signed with (GitLab: carry) a secret
registered for the repository it names.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from klutch_gitops.urls import InvalidRepoURL, normalize_repo_url

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024  # bytes; push payloads list at most 20 commits, far below this

SecretLookup = Callable[[frozenset[str]], Sequence[bytes]]


@dataclass(frozen=True)
class PushEvent:
    provider: str
    urls: frozenset[str]  # normalized (klutch_gitops.urls.normalize_repo_url)
    branch: str
    after: str | None


@dataclass(frozen=True)
class PullRequestEvent:
    """A pull (GitLab: merge) request whose head commit is to be planned against its base."""

    provider: str
    urls: frozenset[str]  # normalized, of the repository the request merges into
    number: int  # GitLab: the merge request's iid
    base: str  # the branch it merges into
    head: str  # its own branch, for messages
    head_sha: str
    head_ref: str  # the ref of the base repository holding the head, for forks too
    api_url: str  # the repository's (GitLab: the project's) API URL


class WebhookError(Exception):
    """A request refused; ``status_code`` and ``message`` go back to the sender."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


@dataclass(frozen=True)
class _Provider:
    event_header: str
    push_event: str
    pull_event: str
    repository_field: str
    url_fields: tuple[str, ...]
    verify: Callable[[Mapping[str, str], bytes, Sequence[bytes]], None]
    pull_request: Callable[[str, Mapping[str, Any], frozenset[str]], PullRequestEvent | str]


def _verify_hmac(
    header: str, prefix: str
) -> Callable[[Mapping[str, str], bytes, Sequence[bytes]], None]:
    def verify(headers: Mapping[str, str], body: bytes, secrets: Sequence[bytes]) -> None:
        signature = headers.get(header.lower())
        if not signature:
            raise WebhookError(401, f"missing {header} header")
        given = signature.strip().lower().removeprefix(prefix).encode()
        if not _any_matches(
            given, [hmac.new(s, body, hashlib.sha256).hexdigest().encode() for s in secrets]
        ):
            raise WebhookError(401, f"{header} does not match a secret of the repository")

    return verify


def _verify_token(headers: Mapping[str, str], body: bytes, secrets: Sequence[bytes]) -> None:
    token = headers.get("x-gitlab-token")
    if not token:
        raise WebhookError(401, "missing X-Gitlab-Token header")
    if not _any_matches(token.encode(), secrets):
        raise WebhookError(401, "X-Gitlab-Token does not match a secret of the repository")


def _any_matches(given: bytes, expected: Sequence[bytes]) -> bool:
    """Compare against every secret, in constant time each, without stopping at a match."""
    matched = False
    for candidate in expected:
        matched |= hmac.compare_digest(given, candidate)
    return matched


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
        number,
        base=_field(payload, "pull_request.base.ref", str),
        head=_field(payload, "pull_request.head.ref", str),
        head_sha=_field(payload, "pull_request.head.sha", str),
        head_ref=f"refs/pull/{number}/head",
        api_url=_field(payload, "repository.url", str),
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
    web_url = _field(payload, "project.web_url", str).rstrip("/")
    project_path = _field(payload, "project.path_with_namespace", str)
    root = web_url.removesuffix(project_path) if web_url.endswith(f"/{project_path}") else ""
    if not root:  # the project lives at the host's root, or the payload disagrees with itself
        parts = urlsplit(web_url)
        root = f"{parts.scheme}://{parts.netloc}/"
    return PullRequestEvent(
        provider,
        urls,
        iid,
        base=_field(payload, "object_attributes.target_branch", str),
        head=_field(payload, "object_attributes.source_branch", str),
        head_sha=_field(payload, "object_attributes.last_commit.id", str),
        head_ref=f"refs/merge-requests/{iid}/head",
        api_url=f"{root}api/v4/projects/{_field(payload, 'project.id', int)}",
    )


PROVIDERS: Mapping[str, _Provider] = {
    "github": _Provider(
        "X-GitHub-Event",
        "push",
        "pull_request",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        _verify_hmac("X-Hub-Signature-256", "sha256="),
        _github_pull,
    ),
    "gitlab": _Provider(
        "X-Gitlab-Event",
        "Push Hook",
        "Merge Request Hook",
        "project",
        ("git_http_url", "git_ssh_url", "web_url"),
        _verify_token,
        _gitlab_merge_request,
    ),
    "gitea": _Provider(
        "X-Gitea-Event",
        "push",
        "pull_request",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        _verify_hmac("X-Gitea-Signature", ""),
        _github_pull,
    ),
}


def parse_push(
    provider: str, headers: Mapping[str, str], body: bytes, secret_for: SecretLookup
) -> PushEvent | None:
    """The verified push in a webhook request; None for anything that is not a branch push.

    Raises WebhookError with the HTTP status to answer. ``secret_for`` gets the normalized URLs
    the payload names and returns the secrets registered for that repository.
    """
    result = _inspect(provider, headers, body, secret_for)
    return result if isinstance(result, PushEvent) else None


def parse_pull_request(
    provider: str, headers: Mapping[str, str], body: bytes, secret_for: SecretLookup
) -> PullRequestEvent | None:
    """The verified pull request to plan in a webhook request; None for anything else.

    Raises WebhookError as :func:`parse_push` does.
    """
    result = _inspect(provider, headers, body, secret_for)
    return result if isinstance(result, PullRequestEvent) else None


def _inspect(
    provider: str, headers: Mapping[str, str], body: bytes, secret_for: SecretLookup
) -> PushEvent | PullRequestEvent | str:
    """A verified push or pull request, or why the request was ignored."""
    spec = PROVIDERS.get(provider)
    if spec is None:
        raise WebhookError(404, f"unknown webhook provider {provider!r}")
    if len(body) > MAX_BODY:
        raise WebhookError(413, f"payload larger than {MAX_BODY} bytes")
    lowered = {name.lower(): value for name, value in headers.items()}
    event = lowered.get(spec.event_header.lower())
    if not event:
        raise WebhookError(400, f"missing {spec.event_header} header")
    payload = _payload(lowered, body)
    urls = _repository_urls(payload, spec)
    if not urls and event in (spec.push_event, spec.pull_event):
        raise WebhookError(400, f"{event} payload lacks the field {spec.repository_field!r}")
    if urls:
        # Verify whatever names a repository, pings included: a wrong secret shows at setup.
        # An empty secret would let anyone sign, so it counts as none.
        secrets = [secret for secret in secret_for(urls) if secret]
        if not secrets:
            raise WebhookError(404, "no repository with a webhook secret registered for this URL")
        spec.verify(lowered, body, secrets)
    if event == spec.pull_event:
        pull = spec.pull_request(provider, payload, urls)
        if isinstance(pull, str):
            return _ignored(provider, urls, pull)
        log.info(
            "webhook pull request %s into %s",
            pull.number,
            pull.base,
            extra={"provider": provider, "repo": sorted(urls), "head": pull.head_sha},
        )
        return pull
    if event != spec.push_event:
        return _ignored(provider, urls, f"{event[:100]!r} events are not pushes or pull requests")
    ref = payload.get("ref")
    after = payload.get("after", payload.get("checkout_sha"))
    if not isinstance(ref, str) or not (after is None or isinstance(after, str)):
        raise WebhookError(400, "push payload lacks a string 'ref' or 'after'")
    if not ref.startswith("refs/heads/"):
        kind = "a tag push" if ref.startswith("refs/tags/") else f"a push to {ref!r}"
        return _ignored(provider, urls, f"{kind} is not a branch push")
    branch = ref.removeprefix("refs/heads/")
    if payload.get("deleted") is True or (after is not None and set(after) == {"0"}):
        return _ignored(provider, urls, f"branch {branch!r} was deleted")
    push = PushEvent(provider, urls, branch, after)
    log.info(
        "webhook push to %s",
        branch,
        extra={"provider": provider, "repo": sorted(urls), "branch": branch, "after": after},
    )
    return push


def _payload(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The JSON payload; GitHub and Gitea may also post it form-encoded as ``payload=``."""
    try:
        text = body.decode()
        if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            text = parse_qs(text).get("payload", [""])[0]
        payload = json.loads(text)
    except (UnicodeDecodeError, ValueError) as error:
        raise WebhookError(400, f"payload is not JSON: {error}") from error
    if not isinstance(payload, dict):
        raise WebhookError(400, "payload is not a JSON object")
    return payload


def _repository_urls(payload: Mapping[str, Any], spec: _Provider) -> frozenset[str]:
    repository = payload.get(spec.repository_field)
    if repository is None:
        return frozenset()
    if not isinstance(repository, dict):
        raise WebhookError(400, f"payload field {spec.repository_field!r} is not an object")
    urls = set()
    for field in spec.url_fields:
        value = repository.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise WebhookError(400, f"payload field {spec.repository_field}.{field} is not text")
        try:
            urls.add(normalize_repo_url(value))
        except InvalidRepoURL as error:
            message = f"payload field {spec.repository_field}.{field}: {error.message}"
            raise WebhookError(400, message) from error
    if not urls:
        raise WebhookError(400, f"payload field {spec.repository_field!r} has no repository URL")
    return frozenset(urls)


def _ignored(provider: str, urls: frozenset[str], why: str) -> str:
    log.info("webhook ignored: %s", why, extra={"provider": provider, "repo": sorted(urls)})
    return why


def webhook_router(
    secret_for: SecretLookup,
    on_push: Callable[[PushEvent], int],
    on_pull_request: Callable[[PullRequestEvent], int],
) -> APIRouter:
    """``POST /webhooks/{provider}``: 202 with how many registrations a push or pull request
    triggered."""
    router = APIRouter()

    @router.post("/webhooks/{provider}")
    async def receive(provider: str, request: Request) -> JSONResponse:
        try:
            if provider not in PROVIDERS:
                raise WebhookError(404, f"unknown webhook provider {provider!r}")
            body = await _read_limited(request)
            result = await run_in_threadpool(_inspect, provider, request.headers, body, secret_for)
        except WebhookError as error:
            log.warning(
                "webhook refused: %s",
                error.message,
                extra={"provider": provider, "status": error.status_code},
            )
            return JSONResponse({"error": error.message}, status_code=error.status_code)
        if isinstance(result, str):
            return JSONResponse({"ignored": result}, status_code=200)
        if isinstance(result, PullRequestEvent):
            triggered = await run_in_threadpool(on_pull_request, result)
        else:
            triggered = await run_in_threadpool(on_push, result)
        return JSONResponse({"triggered": triggered}, status_code=202)

    return router


async def _read_limited(request: Request) -> bytes:
    """The body, refused as soon as it passes MAX_BODY, whatever Content-Length claims."""
    too_large = WebhookError(413, f"payload larger than {MAX_BODY} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            raise too_large
    return bytes(body)
