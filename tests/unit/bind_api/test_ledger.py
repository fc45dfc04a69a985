"""The used-session records' pure parts: names that hide the session, expiry for collection.
The atomic create and its 409 on a replay run against the real apiserver in
tests/security/test_browser_flow.py."""

from __future__ import annotations

from bind_api.ledger import (
    CLOCK_SKEW_SECONDS,
    EXPIRES_ANNOTATION,
    SESSION_LABEL,
    expired,
    record,
    record_name,
)


def test_a_record_names_a_hash_of_the_session_and_its_expiry() -> None:
    lease = record("klutch", "session-secret", expires=1900, now=1000)
    assert lease["metadata"]["name"] == record_name("session-secret")
    assert "session-secret" not in str(lease)
    assert len(lease["metadata"]["name"]) <= 253
    assert lease["metadata"]["namespace"] == "klutch"
    assert lease["metadata"]["labels"] == {SESSION_LABEL: "used"}
    assert lease["metadata"]["annotations"] == {EXPIRES_ANNOTATION: "1900"}
    assert lease["spec"]["leaseDurationSeconds"] == 900
    assert record_name("a") != record_name("b")


def test_only_expired_or_unreadable_records_are_collected() -> None:
    def lease(name: str, expires: str | None) -> dict:
        annotations = {EXPIRES_ANNOTATION: expires} if expires is not None else {}
        return {"metadata": {"name": name, "annotations": annotations}}

    records = [
        lease("old", "699"),
        lease("skew", "700"),  # expired, but a replica whose clock runs behind may still take it
        lease("live", "1001"),
        lease("odd", "x"),
        lease("none", None),
    ]
    assert expired(records, now=1000) == ["old", "odd", "none"]
    assert CLOCK_SKEW_SECONDS == 300
