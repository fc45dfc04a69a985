"""Webhooks from GitHub, GitLab and Gitea: verified per registration, reduced to "this branch
moved" (pushes) or "plan this pull request" (pull and merge requests).

A webhook is only a trigger: the reconciler fetches and verifies the repository itself, so the
payload is read for the repository's URLs, the branches, the commit and the pull request, nothing
else. A request is checked against the *own* secret of every registration whose repository it
names, and only the registrations whose secret verified it are triggered or planned: one
repository's secret never unlocks another's, however many URLs a payload names. Where the forge's
API is comes from the registered URL (``forges.repository_api``), never from the payload.

The signature covers the raw body, and which secrets to try depends on the repository the body
names: so the body is parsed before the check, but only within MAX_BODY bytes and MAX_DEPTH levels
of nesting, and only its repository URLs are read until a secret verified it. Forges sign no
timestamp, so a captured delivery could be sent again: verified deliveries are remembered for a
while (``deliveries.py``) and a replay triggers nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate
from typing import Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from klutch_gitops.urls import MAX_URL_LENGTH, InvalidRepoURL, normalize_repo_url
from reconciler.triggers.deliveries import Deliveries

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024  # bytes; push payloads list at most 20 commits, far below this
# GitHub's deepest payloads (pull_request.head.repo.owner, labels, _links) nest about 6 levels.
MAX_DEPTH = 64
MAX_DELIVERY_ID = 200  # characters; the forges send UUIDs

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


Verify = Callable[[Mapping[str, str], bytes, Sequence[tuple[str, bytes]]], frozenset[str]]


@dataclass(frozen=True)
class _Provider:
    event_header: str
    delivery_header: str
    push_event: str
    pull_event: str
    repository_field: str
    url_fields: tuple[str, ...]
    verify: Verify
    pull_request: Callable[[str, Mapping[str, Any], frozenset[str]], PullRequestEvent | str]


def _verify_hmac(header: str, prefix: str) -> Verify:
    """GitHub's and Gitea's HMAC-SHA256 of the raw body, hex, in ``header``."""

    def verify(
        headers: Mapping[str, str], body: bytes, candidates: Sequence[tuple[str, bytes]]
    ) -> frozenset[str]:
        signature = headers.get(header.lower())
        if not signature:
            raise WebhookError(401, f"missing {header} header")
        given = signature.strip().lower().removeprefix(prefix).encode()
        return _matching(
            given,
            [
                (name, hmac.new(s, body, hashlib.sha256).hexdigest().encode())
                for name, s in candidates
            ],
            header,
        )

    return verify


def _verify_token(
    headers: Mapping[str, str], body: bytes, candidates: Sequence[tuple[str, bytes]]
) -> frozenset[str]:
    """GitLab sends the secret itself in ``X-Gitlab-Token``."""
    token = headers.get("x-gitlab-token")
    if not token:
        raise WebhookError(401, "missing X-Gitlab-Token header")
    return _matching(token.encode(), candidates, "X-Gitlab-Token")


def _matching(given: bytes, expected: Iterable[tuple[str, bytes]], header: str) -> frozenset[str]:
    """The registrations whose expected value is ``given``: every one compared in constant time,
    none skipped after a match; a 401 when none is."""
    results = [(name, hmac.compare_digest(given, value)) for name, value in expected]
    matched = frozenset(name for name, equal in results if equal)
    if not matched:
        raise WebhookError(
            401, f"{header} matches the webhook secret of no registration of this repository"
        )
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
PROVIDERS: Mapping[str, _Provider] = {
    "github": _Provider(
        "X-GitHub-Event",
        "X-GitHub-Delivery",
        "push",
        "pull_request",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        _verify_hmac("X-Hub-Signature-256", "sha256="),
        _github_pull,
    ),
    "gitlab": _Provider(
        "X-Gitlab-Event",
        "Idempotency-Key",
        "Push Hook",
        "Merge Request Hook",
        "project",
        ("git_http_url", "git_ssh_url", "web_url"),
        _verify_token,
        _gitlab_merge_request,
    ),
    "gitea": _Provider(
        "X-Gitea-Event",
        "X-Gitea-Delivery",
        "push",
        "pull_request",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        _verify_hmac("X-Gitea-Signature", ""),
        _github_pull,
    ),
}


def parse_push(
    provider: str, headers: Mapping[str, str], body: bytes, candidates: Candidates
) -> PushEvent | None:
    """The verified push in a webhook request; None for anything that is not a branch push.

    Raises WebhookError with the HTTP status to answer. ``candidates`` gets the normalized URLs
    the payload names and returns the (registration, secret) pairs registered for them.
    """
    result = inspect(provider, headers, body, candidates)
    return result if isinstance(result, PushEvent) else None


def parse_pull_request(
    provider: str, headers: Mapping[str, str], body: bytes, candidates: Candidates
) -> PullRequestEvent | None:
    """The verified pull request to plan in a webhook request; None for anything else.

    Raises WebhookError as :func:`parse_push` does.
    """
    result = inspect(provider, headers, body, candidates)
    return result if isinstance(result, PullRequestEvent) else None


def inspect(
    provider: str, headers: Mapping[str, str], body: bytes, candidates: Candidates
) -> Event | str:
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
    if not urls:
        if event in (spec.push_event, spec.pull_event):
            raise WebhookError(400, f"{event} payload lacks the field {spec.repository_field!r}")
        return _ignored(provider, urls, f"{event[:100]!r} events are not pushes or pull requests")
    # Verify whatever names a repository, pings included: a wrong secret shows at setup.
    # An empty secret would let anyone sign, so it counts as none.
    pairs = [(name, secret) for name, secret in candidates(urls) if secret]
    if not pairs:
        raise WebhookError(404, "no registration with a webhook secret names this repository")
    verified = spec.verify(lowered, body, pairs)
    delivery = lowered.get(spec.delivery_header.lower(), "")[:MAX_DELIVERY_ID]
    receipt = {"delivery": delivery, "digest": hashlib.sha256(body).hexdigest()}
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
        return replace(pull, registrations=verified, **receipt)
    if event != spec.push_event:
        return _ignored(provider, urls, f"{event[:100]!r} events are not pushes or pull requests")
    ref = payload.get("ref")
    after = payload.get("after", payload.get("checkout_sha"))
    if not isinstance(ref, str) or not (after is None or isinstance(after, str)):
        raise WebhookError(400, "push payload lacks a string 'ref' or 'after'")
    if not ref.startswith("refs/heads/"):
        kind = "a tag push" if ref.startswith("refs/tags/") else f"a push to {ref[:200]!r}"
        return _ignored(provider, urls, f"{kind} is not a branch push")
    branch = ref.removeprefix("refs/heads/")
    if payload.get("deleted") is True or (after is not None and set(after) == {"0"}):
        return _ignored(provider, urls, f"branch {branch[:200]!r} was deleted")
    push = PushEvent(provider, urls, verified, branch, after, **receipt)
    log.info(
        "webhook push to %s",
        branch,
        extra={"provider": provider, "repo": sorted(urls), "branch": branch, "after": after},
    )
    return push


# A JSON string (escapes included), so that brackets inside strings are not counted. The closing
# quote is optional: an unterminated string runs to the end in one match, where a required quote
# made every later '"' start a scan to the end again (quadratic: 48 KB took 5 s, holding the GIL).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)


def nesting_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest, counted without recursion."""
    brackets = _JSON_STRING.sub("", text)
    steps = (1 if c in "[{" else -1 for c in brackets if c in "[]{}")
    return max(accumulate(steps), default=0)


def _payload(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """The JSON payload, within MAX_DEPTH; GitHub and Gitea may also post it form-encoded as
    ``payload=``."""
    try:
        text = body.decode()
        if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            text = parse_qs(text, max_num_fields=100).get("payload", [""])[0]
        if nesting_depth(text) > MAX_DEPTH:
            raise WebhookError(
                400, f"payload nests deeper than {MAX_DEPTH} levels; no forge sends that"
            )
        payload = json.loads(text)
    except (UnicodeDecodeError, ValueError) as error:
        raise WebhookError(400, f"payload is not JSON: {str(error)[:200]}") from error
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
        if len(value) > MAX_URL_LENGTH:
            raise WebhookError(
                400,
                f"payload field {spec.repository_field}.{field} is longer than "
                f"{MAX_URL_LENGTH} characters; no repository URL is",
            )
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
    candidates: Candidates,
    on_push: Callable[[PushEvent], int],
    on_pull_request: Callable[[PullRequestEvent], int],
    deliveries: Deliveries | None = None,
) -> APIRouter:
    """``POST /webhooks/{provider}``: 202 with how many registrations a push or pull request
    triggered; a delivery that every registration it verified for has seen already is a 200
    that triggers nothing."""
    router = APIRouter()
    seen = deliveries if deliveries is not None else Deliveries()

    @router.post("/webhooks/{provider}")
    async def receive(provider: str, request: Request) -> JSONResponse:
        try:
            if provider not in PROVIDERS:
                raise WebhookError(404, f"unknown webhook provider {provider!r}")
            body = await _read_limited(request)
            result = await run_in_threadpool(inspect, provider, request.headers, body, candidates)
        except WebhookError as error:
            log.warning(
                "webhook refused: %s",
                error.message,
                extra={"provider": provider, "status": error.status_code},
            )
            return JSONResponse({"error": error.message}, status_code=error.status_code)
        if isinstance(result, str):
            return JSONResponse({"ignored": result}, status_code=200)
        keys = (provider, result.delivery, result.digest)
        fresh = seen.admit(result.registrations, *keys)
        if not fresh:
            why = "this delivery was received already; a replay triggers nothing"
            return JSONResponse({"ignored": _ignored(provider, result.urls, why)}, status_code=200)
        event = replace(result, registrations=fresh)
        try:
            if isinstance(event, PullRequestEvent):
                triggered = await run_in_threadpool(on_pull_request, event)
            else:
                triggered = await run_in_threadpool(on_push, event)
        except Exception:
            seen.forget(fresh, *keys)  # the forge's redelivery may try again
            raise
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
