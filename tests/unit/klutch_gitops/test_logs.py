"""JSON log lines, and the scrubbing that keeps credentials out of them."""

from __future__ import annotations

import ast
import base64
import json
import logging
import sys
from pathlib import Path

from klutch_gitops import logs
from klutch_gitops.logs import CONTEXT, JsonFormatter, scrub, timestamp

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJkZXYifQ.c2lnbmF0dXJlLWJ5dGVz"
PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBx\n-----END EC PRIVATE KEY-----\n"
ROOT = Path(__file__).resolve().parents[3]


def line(
    message: str, *args: object, exc: bool = False, created: float | None = None, **extra: object
) -> dict:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, message, args, None)
    if created is not None:
        record.created = created
    record.__dict__.update(extra)
    if exc:
        try:
            raise ValueError(f"bad token {JWT}")
        except ValueError:
            record.exc_info = sys.exc_info()
    text = JsonFormatter().format(record)
    assert "\n" not in text
    return json.loads(text)


def test_a_line_is_one_json_object_with_the_extra_fields() -> None:
    entry = line("bound %s", "x", consumer="cluster-1", apis=["a.b"], color_message="\x1b[1m")
    assert entry["message"] == "bound x"
    assert (entry["level"], entry["logger"], entry["consumer"]) == ("info", "t", "cluster-1")
    assert entry["apis"] == ["a.b"]
    assert "color_message" not in entry


def test_time_is_rfc_3339_in_utc_to_the_millisecond() -> None:
    assert line("x", created=1795561501.123456)["time"] == "2026-11-24T23:05:01.123Z"
    assert timestamp(0.0) == "1970-01-01T00:00:00.000Z"
    # whatever the process's local zone: the zone is always Z
    assert timestamp(1795561501.9999).endswith(":01.999Z")


def test_keys_come_in_the_documented_order() -> None:
    entry = line(
        "pass failed",
        exc=True,
        zeta=1,
        error="push refused",
        alpha=2,
        commit="abc123",
        repository="team-a/payments",
        fix="grant the bot push rights",
    )
    assert list(entry) == [
        "time",
        "level",
        "logger",
        "message",
        "repository",
        "commit",
        "error",
        "fix",
        "alpha",
        "zeta",
        "exception",
    ]
    assert len(set(CONTEXT)) == len(CONTEXT)
    docstring = logs.__doc__ or ""
    assert all(f"``{key}``" in docstring for key in CONTEXT), "list every context key"


def test_credentials_are_masked_wherever_they_appear() -> None:
    key_data = base64.b64encode(PEM.encode()).decode()
    entry = line(
        "calling with Authorization: Bearer %s",
        "opaque-access-token-0123456789",
        exc=True,
        token=JWT,
        remote="https://bot:hunter2@git.example.com/team.git",
        kubeconfig={"users": [{"user": {"client-key-data": key_data, "key": PEM}}]},
        request=object(),
    )
    text = json.dumps(entry)
    for secret in (JWT, "opaque-access-token", "hunter2", key_data, "MHcCAQEEIBx"):
        assert secret not in text, secret
    assert entry["message"] == "calling with Authorization: Bearer ***"
    assert entry["remote"] == "https://bot:***@git.example.com/team.git"
    assert "bad token ***" in entry["exception"]


def test_ordinary_text_is_left_alone() -> None:
    for text in (
        'Bearer error="invalid_token"',
        "token expired: log in again",
        "ssh://git@github.com/org/repo",
        "consumer cluster-0a1b2c",
    ):
        assert scrub(text) == text


def test_no_extra_field_overwrites_a_log_record_attribute() -> None:
    """``extra={"name": ...}`` raises KeyError, but only once the level is enabled: in a
    running process, not in a test that never turns INFO on."""
    # the record's attributes, and the keys every line leads with or ends with
    reserved = set(vars(logging.LogRecord("t", logging.INFO, "", 0, "", None, None))) | {
        "message",
        "asctime",
        "time",
        "level",
        "logger",
        "exception",
    }
    clashes = []
    for package in ("klutch_gitops", "reconciler", "bind_api"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.keyword) or node.arg != "extra":
                    continue
                if not isinstance(node.value, ast.Dict):
                    continue
                for key in node.value.keys:
                    if isinstance(key, ast.Constant) and key.value in reserved:
                        clashes.append(f"{path.relative_to(ROOT)}:{key.lineno} {key.value!r}")
    assert clashes == []
