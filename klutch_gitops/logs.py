"""Structured logs: one JSON object per line, with the ``extra`` fields a call site passes.

Keys come in one order, so lines read alike and a log pipeline needs no per-line mapping:

- ``time``: RFC 3339 in UTC with milliseconds (``2026-11-24T23:05:01.123Z``), like the
  timestamps Kubernetes and Flux controllers log;
- ``level`` (debug, info, warning, error, critical), ``logger`` (the module), ``message``;
- then the context fields, when given, in this order: ``repository`` (a registration,
  ``namespace/name``), ``consumer``, ``binding``, ``identity``, ``namespace``, ``kind``,
  ``object``, ``shard``, ``commit``, ``reason``, ``error``, ``fix``;
- then any other ``extra`` field, sorted by key, and ``exception`` (a traceback) last.

Every string on a line (message, extra fields, exception) passes ``scrub`` first, a safety net
under the rule that tokens and passwords never enter logs: bearer tokens, JWTs (ID and
ServiceAccount tokens), passwords in URLs and private keys, PEM or base64-encoded as in a
kubeconfig's ``client-key-data``, become ``***``.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

from klutch_gitops.urls import redact

# uvicorn's ``color_message`` repeats the message with terminal colours: noise in JSON
_STANDARD = set(logging.makeLogRecord({}).__dict__) | {"message", "asctime", "color_message"}
# The context fields, in the order a line shows them after time, level, logger and message.
CONTEXT = (
    "repository",
    "consumer",
    "binding",
    "identity",
    "namespace",
    "kind",
    "object",
    "shard",
    "commit",
    "reason",
    "error",
    "fix",
)
MASK = "***"
_SECRETS = (
    (re.compile(r"(?i)\b(bearer\s+)[\w.~+/-]{16,}=*"), rf"\g<1>{MASK}"),  # RFC 6750 b64token
    (re.compile(r"\beyJ[\w-]+\.[\w-]+\.[\w-]*"), MASK),  # a JWT: base64url of '{"' first
    (
        re.compile(
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)", re.S
        ),
        MASK,
    ),
    (re.compile(r"LS0tLS1CRUdJT[A-Za-z0-9+/]*={0,2}"), MASK),  # base64 of '-----BEGIN …'
)


def scrub(text: str) -> str:
    """``text`` without the credentials it might carry."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return redact(text)


def _scrubbed(value: Any) -> Any:
    if isinstance(value, str):
        return scrub(value)
    if isinstance(value, dict):
        return {k: _scrubbed(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_scrubbed(v) for v in value]
    if isinstance(value, bool | int | float) or value is None:
        return value
    return scrub(str(value))


def timestamp(created: float) -> str:
    """``created`` (Unix time) in RFC 3339, UTC, to the millisecond."""
    moment = datetime.fromtimestamp(created, UTC)
    return moment.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        extra = {k: v for k, v in record.__dict__.items() if k not in _STANDARD}
        entry.update({k: extra.pop(k) for k in CONTEXT if k in extra})
        entry.update(sorted(extra.items()))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(_scrubbed(entry))


def configure(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    for noisy in ("urllib3", "kubernetes", "httpx", "uvicorn.access", "watchfiles"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
