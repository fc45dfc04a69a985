"""JSON log lines, and the scrubbing that keeps credentials out of them."""

from __future__ import annotations

import ast
import base64
import json
import logging
import sys
from pathlib import Path

from klutch_gitops.logs import JsonFormatter, scrub

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJkZXYifQ.c2lnbmF0dXJlLWJ5dGVz"
PEM = "-----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBx\n-----END EC PRIVATE KEY-----\n"
ROOT = Path(__file__).resolve().parents[2]


def line(message: str, *args: object, exc: bool = False, **extra: object) -> dict:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, message, args, None)
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
    reserved = set(vars(logging.LogRecord("t", logging.INFO, "", 0, "", None, None))) | {
        "message",
        "asctime",
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
