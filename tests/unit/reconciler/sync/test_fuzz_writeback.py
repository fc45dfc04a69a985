"""Property-based tests of the inline status write-back (``render_changes`` in inline mode, over
``set_status``): for any claim the loader accepts and any status, it changes nothing in the file
but that claim's ``status:`` lines, the loader reads back the same claims with the new status,
writing the same status again changes nothing, a status inserted is removed without a trace, and
files the loader refuses, however hostile, are passed over within bounded memory and time."""

from __future__ import annotations

import tempfile
import textwrap
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from klutch_gitops.yamlsafe import load_documents
from reconciler.manifests import Claim
from reconciler.sync.desired import DesiredState, load_desired
from reconciler.sync.writeback import Mode, ObservedStatus, Summary, render_changes
from tests.unit.reconciler.sync.fuzzgen import (
    EXPORTS,
    FUZZ,
    LIMITS,
    MEMORY_BOUND,
    STATUSES,
    ClaimFile,
    bounded,
    claim_files,
    hostile,
)

FILE = "claims/file.yaml"
SUMMARY = Summary("0" * 40, {}, (), "team-a")
NOW = datetime(2024, 5, 1, tzinfo=UTC)


@contextmanager
def _tree(files: dict[str, bytes]) -> Iterator[Path]:
    """A work tree with ``files`` (hypothesis cannot share pytest's tmp_path between examples)."""
    with tempfile.TemporaryDirectory() as root:
        for name, content in files.items():
            path = Path(root, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
        yield Path(root)


def _write(root: Path, statuses: Sequence[ObservedStatus]) -> str | None:
    """Render the inline write-back into ``root``; the claim file's new text, None if unchanged."""
    changes = render_changes(root, "", Mode.INLINE, statuses, SUMMARY, NOW)
    assert set(changes) <= {FILE, ".klutch/reconcile.yaml"}
    if FILE not in changes:
        return None
    content = changes[FILE]
    assert content is not None
    (root / FILE).write_bytes(content)
    return content.decode()


def _where(state: DesiredState) -> dict[int, Claim]:
    return {claim.location.document: claim for claim in state.claims}


def _same_claim(before: Claim, after: Claim) -> None:
    """Equal but for the status, and the line, which moves when a status above it grows."""
    assert after.identity == before.identity
    assert after.api_version == before.api_version
    assert after.body == before.body
    assert after.location.file == before.location.file
    assert after.location.document == before.location.document


def _terminated(text: str, newline: str) -> str:
    return text if text.endswith("\n") else text + newline


def _check_splice(file: ClaimFile, index: int, edited: str, status: Any) -> None:
    """``edited`` is the file with the claim's status lines replaced by a block that reads as
    ``status`` and nothing else, byte for byte elsewhere (a missing final newline stays missing).
    """
    newline = "\r\n" if "\r\n" in file.text else "\n"
    assert edited.endswith("\n") == file.text.endswith("\n")
    original, edited = _terminated(file.text, newline), _terminated(edited, newline)
    start, end = next(doc.slot for doc in file.claims if doc.index == index)
    head, tail = original[:start], original[end:]
    assert edited.startswith(head)
    assert edited.endswith(tail)
    assert len(edited) >= len(head) + len(tail)
    block = edited[len(head) : len(edited) - len(tail)]
    if status is None:
        assert block == ""
        return
    assert block.endswith(newline)
    assert all(line.endswith("\r") == (newline == "\r\n") for line in block.split("\n")[:-1])
    (document,) = load_documents(textwrap.dedent(block), LIMITS)
    assert document.value == {"status": status}


@settings(FUZZ, max_examples=120)
@given(file=claim_files(), data=st.data())
def test_inline_write_back_changes_nothing_but_the_status(file: ClaimFile, data: Any) -> None:
    target = data.draw(st.sampled_from(file.claims))
    status = data.draw(st.one_of(st.none(), STATUSES))
    hint = data.draw(st.sampled_from((FILE, None)))  # None: the claim is searched for
    with _tree({FILE: file.text.encode()}) as root:
        before = load_desired(root, "", EXPORTS)
        claims = _where(before)
        claim = claims[target.index]

        def observed(status: Any) -> ObservedStatus:
            return ObservedStatus(claim.identity, claim.api_version, status, hint)

        # the other claims are reported with the status they have: they must stay as they are
        unchanged = [
            ObservedStatus(c.identity, c.api_version, c.git_status, hint)
            for c in before.claims
            if c is not claim
        ]
        edited = _write(root, [observed(status), *unchanged])
        if status == claim.git_status:
            assert edited is None  # the loader reads this status there already
            return
        assert edited is not None
        _check_splice(file, target.index, edited, status)

        after = load_desired(root, "", EXPORTS)
        assert [r.as_dict() for r in after.rejections] == [r.as_dict() for r in before.rejections]
        assert _where(after).keys() == claims.keys()
        for index, written in _where(after).items():
            _same_claim(claims[index], written)
            expected = status if index == target.index else claims[index].git_status
            assert written.git_status == expected

        assert _write(root, [observed(status), *unchanged]) is None  # written once, it is there

        # Another status and back: the same everywhere but in the status block, whose layout
        # follows the document's, the status written over included, so it need not be the same.
        other = data.draw(STATUSES.filter(lambda s: s != status))
        assert _write(root, [observed(other)]) is not None
        restored = _write(root, [observed(status)])
        assert restored is not None
        _check_splice(file, target.index, restored, status)

        if target.slot[0] == target.slot[1] and status is not None:  # inserted: removable again
            assert _write(root, [observed(None)]) == file.text


@settings(FUZZ, max_examples=25)
@given(file=claim_files(max_claims=1), text=hostile(top=18))
def test_files_the_loader_refuses_are_passed_over_within_bounds(file: ClaimFile, text: str) -> None:
    """A claim that moved is searched for in every file, hostile ones first (sorted before it)."""
    neighbour = text.encode("utf-8", "surrogatepass")
    with _tree({FILE: file.text.encode(), "a/hostile.yaml": neighbour}) as root:
        (claim,) = load_desired(root, "claims", EXPORTS).claims
        status = {"phase": ["Ready"] * 4}  # longer than any list the claim files hold
        observed = ObservedStatus(claim.identity, claim.api_version, status)
        with bounded() as peak:
            changes = render_changes(root, "", Mode.INLINE, [observed], SUMMARY, NOW)
        assert peak() < MEMORY_BOUND, f"{peak() >> 20} MiB"
        assert set(changes) == {FILE, ".klutch/reconcile.yaml"}
        assert (root / "a/hostile.yaml").read_bytes() == neighbour
