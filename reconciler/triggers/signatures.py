"""Whether a webhook request comes from the forge: checked against each registration's secret."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable, Iterable, Mapping, Sequence

from reconciler.triggers.webhook_events import WebhookError

Verify = Callable[[Mapping[str, str], bytes, Sequence[tuple[str, bytes]]], frozenset[str]]


def verify_hmac(header: str, prefix: str) -> Verify:
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


def verify_token(
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
