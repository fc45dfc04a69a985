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
of nesting (``payloads.py``), and only its repository URLs are read until a secret verified it
(``signatures.py``); what each forge sends is in ``providers.py``. Forges sign no
timestamp, so a captured delivery could be sent again: verified deliveries are remembered for a
while (``deliveries.py``) and a replay triggers nothing.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypedDict

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from reconciler.triggers.deliveries import Deliveries
from reconciler.triggers.payloads import parse_payload, repository_urls
from reconciler.triggers.providers import PROVIDERS, Provider
from reconciler.triggers.webhook_events import (
    Candidates,
    Event,
    PullRequestEvent,
    PushEvent,
    WebhookError,
)

log = logging.getLogger(__name__)

MAX_BODY = 1024 * 1024  # bytes; push payloads list at most 20 commits, far below this
MAX_DELIVERY_ID = 200  # characters; the forges send UUIDs


class Receipt(TypedDict):
    """What a verified delivery carries into its event: its ID and the digest of its body."""

    delivery: str
    digest: str


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
    payload = parse_payload(lowered, body)
    urls = repository_urls(payload, spec)
    if not urls:
        if event in (spec.push_event, spec.pull_event):
            raise WebhookError(400, f"{event} payload lacks the field {spec.repository_field!r}")
        return _ignored(provider, urls, f"{event[:100]!r} events are not pushes or pull requests")
    verified = _verify(spec, lowered, body, candidates(urls))
    delivery = lowered.get(spec.delivery_header.lower(), "")[:MAX_DELIVERY_ID]
    receipt = Receipt(delivery=delivery, digest=hashlib.sha256(body).hexdigest())
    if event == spec.pull_event:
        return _pull_request(spec, provider, payload, urls, verified, receipt)
    if event != spec.push_event:
        return _ignored(provider, urls, f"{event[:100]!r} events are not pushes or pull requests")
    return _push(provider, payload, urls, verified, receipt)


def _verify(
    spec: Provider, headers: Mapping[str, str], body: bytes, candidates: Sequence[tuple[str, bytes]]
) -> frozenset[str]:
    """The registrations whose own secret verified the request. Whatever names a repository is
    verified, pings included: a wrong secret shows at setup."""
    # An empty secret would let anyone sign, so it counts as none.
    pairs = [(name, secret) for name, secret in candidates if secret]
    if not pairs:
        raise WebhookError(404, "no registration with a webhook secret names this repository")
    return spec.verify(headers, body, pairs)


def _pull_request(
    spec: Provider,
    provider: str,
    payload: Mapping[str, Any],
    urls: frozenset[str],
    verified: frozenset[str],
    receipt: Receipt,
) -> PullRequestEvent | str:
    pull = spec.pull_request(provider, payload, urls)
    if isinstance(pull, str):
        return _ignored(provider, urls, pull)
    log.info(
        "webhook pull request %s into %s",
        pull.number,
        pull.base,
        extra={"provider": provider, "urls": sorted(urls), "head": pull.head_sha},
    )
    return replace(pull, registrations=verified, **receipt)


def _push(
    provider: str,
    payload: Mapping[str, Any],
    urls: frozenset[str],
    verified: frozenset[str],
    receipt: Receipt,
) -> PushEvent | str:
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
        extra={"provider": provider, "urls": sorted(urls), "branch": branch, "after": after},
    )
    return push


def _ignored(provider: str, urls: frozenset[str], why: str) -> str:
    log.info("webhook ignored: %s", why, extra={"provider": provider, "urls": sorted(urls)})
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
