""".klutch/reconcile.yaml: one entry per registration, and nothing in it that every push changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import yaml

from reconciler.manifests import Rejection
from reconciler.sync.report import Summary, render_report

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)
REFUSED = Rejection("claims/db.yaml", "spec.plan: unknown plan", "name a plan of the export")


def summary(registration: str, source: str = "a" * 40, claims: int = 1) -> Summary:
    return Summary(source, {"claims": claims, "rejected": 0}, (REFUSED,), registration)


def test_a_new_source_commit_alone_changes_nothing() -> None:
    first = render_report(None, summary("team-a", source="a" * 40), NOW)
    later = NOW + timedelta(minutes=5)
    assert render_report(first, summary("team-a", source="b" * 40), later) is first
    assert "a" * 40 not in first.decode()  # the report names no commit
    entry = yaml.safe_load(first)["registrations"]["team-a"]
    assert entry == {
        "reconciledAt": "2026-11-24T12:00:00Z",
        "counts": {"claims": 1, "rejected": 0},
        "rejections": [REFUSED.as_dict()],
    }


def test_registrations_sharing_a_path_keep_each_others_entries() -> None:
    mine = render_report(None, summary("team-a"), NOW)
    both = render_report(mine, summary("team-b", claims=2), NOW)
    again = render_report(both, summary("team-a", claims=3), NOW + timedelta(seconds=1))
    entries = yaml.safe_load(again)["registrations"]
    assert sorted(entries) == ["team-a", "team-b"]
    assert entries["team-a"]["counts"]["claims"] == 3
    assert entries["team-b"] == yaml.safe_load(both)["registrations"]["team-b"]


def test_a_report_of_the_old_shape_is_replaced() -> None:
    old = b"sourceCommit: abc\nreconciledAt: '2025-01-01T00:00:00Z'\ncounts: {claims: 1}\n"
    report = yaml.safe_load(render_report(old, summary("team-a"), NOW))
    assert list(report) == ["registrations"]
    assert list(report["registrations"]) == ["team-a"]
