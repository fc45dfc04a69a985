"""Push webhooks from GitHub, GitLab and Gitea: verified, reduced to "this branch moved".

A webhook is only a trigger: the reconciler fetches and verifies the repository itself, so the
payload is read for the repository's URLs, the branch and the new commit, nothing else. Every
request must be signed with (GitLab: carry) a secret registered for the repository it names.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

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
    repository_field: str
    url_fields: tuple[str, ...]
    verify: Callable[[Mapping[str, str], bytes, Sequence[bytes]], None]


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


PROVIDERS: Mapping[str, _Provider] = {
    "github": _Provider(
        "X-GitHub-Event",
        "push",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        _verify_hmac("X-Hub-Signature-256", "sha256="),
    ),
    "gitlab": _Provider(
        "X-Gitlab-Event",
        "Push Hook",
        "project",
        ("git_http_url", "git_ssh_url", "web_url"),
        _verify_token,
    ),
    "gitea": _Provider(
        "X-Gitea-Event",
        "push",
        "repository",
        ("clone_url", "ssh_url", "html_url"),
        _verify_hmac("X-Gitea-Signature", ""),
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


def _inspect(
    provider: str, headers: Mapping[str, str], body: bytes, secret_for: SecretLookup
) -> PushEvent | str:
    """A verified push, or why the request was ignored."""
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
    if not urls and event == spec.push_event:
        raise WebhookError(400, f"push payload lacks the field {spec.repository_field!r}")
    if urls:
        # Verify whatever names a repository, pings included: a wrong secret shows at setup.
        # An empty secret would let anyone sign, so it counts as none.
        secrets = [secret for secret in secret_for(urls) if secret]
        if not secrets:
            raise WebhookError(404, "no repository with a webhook secret registered for this URL")
        spec.verify(lowered, body, secrets)
    if event != spec.push_event:
        return _ignored(provider, urls, f"{event[:100]!r} events are not pushes")
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


def webhook_router(secret_for: SecretLookup, on_push: Callable[[PushEvent], int]) -> APIRouter:
    """``POST /webhooks/{provider}``: 202 with how many registrations a push triggered."""
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
