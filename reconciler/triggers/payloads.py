"""Reading a webhook body before it is verified: bounded JSON, and only the repository's URLs."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from itertools import accumulate
from typing import Any
from urllib.parse import parse_qs

from klutch_gitops.urls import MAX_URL_LENGTH, InvalidRepoURL, normalize_repo_url
from reconciler.triggers.providers import Provider
from reconciler.triggers.webhook_events import WebhookError

# GitHub's deepest payloads (pull_request.head.repo.owner, labels, _links) nest about 6 levels.
MAX_DEPTH = 64


# A JSON string (escapes included), so that brackets inside strings are not counted. The closing
# quote is optional: an unterminated string runs to the end in one match, where a required quote
# made every later '"' start a scan to the end again (quadratic: 48 KB took 5 s, holding the GIL).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)


def nesting_depth(text: str) -> int:
    """How deep ``text``'s arrays and objects nest, counted without recursion."""
    brackets = _JSON_STRING.sub("", text)
    steps = (1 if c in "[{" else -1 for c in brackets if c in "[]{}")
    return max(accumulate(steps), default=0)


def parse_payload(headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
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


def repository_urls(payload: Mapping[str, Any], spec: Provider) -> frozenset[str]:
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
