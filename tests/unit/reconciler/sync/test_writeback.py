"""The inline write-back finds claims, and compares their status, as the loader reads them."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.sync.desired import Limits, load_desired
from reconciler.sync.writeback import Mode, ObservedStatus, Summary, render_changes
from tests.unit.reconciler.sync.fuzzgen import EXPORTS

SUMMARY = Summary("0" * 40, {}, (), "team-a")
NOW = datetime(2024, 5, 1, tzinfo=UTC)
REPORT = ".klutch/reconcile.yaml"


def claim(name: str, status: str = "") -> str:
    return (
        "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
        f"metadata:\n  name: {name}\n  namespace: team-a\nspec: {{}}\n{status}"
    )


def render(root: Path, status: object, hint: str | None = "claims.yaml") -> dict[str, bytes | None]:
    """Report ``status`` for every claim under ``root``; the changes, without the report."""
    statuses = [
        ObservedStatus(c.identity, c.api_version, c.git_status if status is None else status, hint)
        for c in load_desired(root, "", EXPORTS).claims
    ]
    assert statuses
    changes = render_changes(root, "", Mode.INLINE, statuses, SUMMARY, NOW)
    return {file: content for file, content in changes.items() if file != REPORT}


@pytest.mark.parametrize("name", ["1e3", "0o17", "1e-3"])
def test_a_claim_whose_name_yaml_12_reads_as_a_number_gets_its_status(
    tmp_path: Path, name: str
) -> None:
    # Regression: claims were looked up as YAML 1.2 reads them, which takes these names for numbers
    # (1000.0, 15, 0.001), so the loader's claim was never found and its status never written.
    (tmp_path / "claims.yaml").write_text(claim(name))
    assert render(tmp_path, {"phase": "Ready"}) == {
        "claims.yaml": (claim(name) + "status:\n  phase: Ready\n").encode()
    }


def test_a_status_the_loader_already_reads_is_left_as_it_is(tmp_path: Path) -> None:
    # Regression: compared as YAML 1.2 reads it, an empty `status:` was removed for a claim with no
    # status observed, and `ready: yes` (true to the loader) rewritten as `ready: true`.
    text = claim("a", "status:\n") + "---\n" + claim("b", "status:\n  ready: yes\n")
    (tmp_path / "claims.yaml").write_text(text)
    assert render(tmp_path, None) == {}
    assert render(tmp_path, None, hint=None) == {}


@pytest.mark.parametrize("hint", ["claims.yaml", None])
def test_files_the_loader_refuses_do_not_stop_the_write_back(
    tmp_path: Path, hint: str | None
) -> None:
    # Regression: a claim that is searched for (no hint, or it moved) made the write-back parse
    # every file with an unbounded parser: deep nesting raised RecursionError out of it, and a
    # file of any size was read whole.
    (tmp_path / "a").mkdir()
    (tmp_path / "a/deep.yaml").write_text("[" * 100_000)
    (tmp_path / "a/huge.yaml").write_text("#" * (Limits().max_file_bytes + 1))
    (tmp_path / "claims.yaml").write_text(claim("a"))
    assert render(tmp_path, {"phase": "Ready"}, hint) == {
        "claims.yaml": (claim("a") + "status:\n  phase: Ready\n").encode()
    }


def test_a_claim_the_splice_cannot_parse_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The loader accepts a claim written as one flow mapping; the splice does not edit those.
    text = (
        "{apiVersion: anynines.com/v1, kind: PostgresqlInstance,\n"
        " metadata: {name: a, namespace: team-a}, spec: {}}\n"
    )
    (tmp_path / "claims.yaml").write_text(text)
    with caplog.at_level(logging.WARNING):
        assert render(tmp_path, {"phase": "Ready"}) == {}
    assert "not written into claims.yaml" in caplog.text


def test_the_status_goes_into_the_definition_the_loader_took(tmp_path: Path) -> None:
    # A first definition the loader refuses (its spec is no object) stands before the one it
    # takes: the status belongs to the second, not to the first with the same identity.
    schema = {"type": "object", "properties": {"spec": {"type": "object"}}}
    exports = {key: replace(export, schemas={"v1": schema}) for key, export in EXPORTS.items()}
    refused = claim("a").replace("spec: {}\n", "spec: not-an-object\n")
    (tmp_path / "claims.yaml").write_text(refused + "---\n" + claim("a"))
    [taken] = load_desired(tmp_path, "", exports).claims
    assert taken.location.document == 1
    observed = ObservedStatus(
        taken.identity, taken.api_version, {"phase": "Ready"}, "claims.yaml", 1
    )
    changes = render_changes(tmp_path, "", Mode.INLINE, [observed], SUMMARY, NOW)
    written = refused + "---\n" + claim("a") + "status:\n  phase: Ready\n"
    assert changes["claims.yaml"] == written.encode()
