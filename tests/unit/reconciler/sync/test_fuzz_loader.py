"""Property-based tests of the manifest loader: whatever a repository holds, ``load_documents``
answers with documents or its own YamlError, ``load_desired`` with claims and rejections (never an
exception), files written the ways people write them load as written, and hostile files are
refused within bounded memory and time."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klutch_gitops.yamlsafe import Document, YamlError, load_documents
from reconciler.sync.desired import DesiredState, load_desired
from tests.unit.reconciler.sync.fuzzgen import (
    EXPORTS,
    FUZZ,
    LIMITS,
    MEMORY_BOUND,
    ClaimFile,
    bounded,
    claim_files,
    hostile,
    mutations,
)

FILE = "claims/file.yaml"
ANY_CHARACTER = st.characters(exclude_categories=())  # lone surrogates and control characters too
YAMLISH = st.text(
    st.sampled_from([*"ab1 :-,[]{}&*!|>'\"#?%@`\n\r\t.=<~\\", "\x85", "\u2028", "\ufeff", "é"]),
    max_size=300,
)
TEXTS = st.one_of(
    st.text(ANY_CHARACTER, max_size=200),
    YAMLISH,
    mutations(claim_files().map(lambda file: file.text)),
    mutations(YAMLISH),
    st.builds(lambda file, tail: file.text + tail, claim_files(max_claims=1), YAMLISH),
)


@contextmanager
def _tree(content: bytes) -> Iterator[Path]:
    """A work tree holding ``content`` as its one YAML file (hypothesis cannot share tmp_path)."""
    with tempfile.TemporaryDirectory() as root:
        path = Path(root, FILE)
        path.parent.mkdir()
        path.write_bytes(content)
        yield Path(root)


def _load(content: bytes) -> DesiredState:
    with _tree(content) as root:
        return load_desired(root, "", EXPORTS)


def _encode(text: str) -> bytes:
    """UTF-8, but a lone surrogate becomes bytes that are not UTF-8."""
    return text.encode("utf-8", "surrogatepass")


def _containers(value: Any, seen: set[int]) -> None:
    """Asserts that ``value`` is JSON-like and that no dict or list appears twice in it."""
    if isinstance(value, dict | list):
        assert id(value) not in seen, "a dict or list is shared: editing one place edits another"
        seen.add(id(value))
        items = [*value.keys(), *value.values()] if isinstance(value, dict) else value
        for item in items:
            _containers(item, seen)
    else:
        assert value is None or isinstance(value, str | int | float | bool), value


def _check_documents(text: str, outcome: list[Document] | YamlError) -> None:
    # YAML 1.1's line breaks, at most, and one more: libyaml puts the end of an unterminated last
    # line (where an error or an empty last document is) on the line after it
    lines = sum(map(text.count, "\n\r\x85\u2028\u2029")) + 2
    if isinstance(outcome, YamlError):
        assert outcome.message
        assert outcome.fix
        assert outcome.line is None or 1 <= outcome.line <= lines
        assert outcome.document is None or outcome.document >= 0
        return
    assert [document.index for document in outcome] == list(range(len(outcome)))
    assert all(1 <= document.line <= lines for document in outcome)
    seen: set[int] = set()
    for document in outcome:
        _containers(document.value, seen)


def _documents(text: str) -> list[Document] | YamlError:
    """Anything but a YamlError escapes and fails the property."""
    try:
        return load_documents(text, LIMITS)
    except YamlError as error:
        return error


@FUZZ
@given(st.one_of(TEXTS, hostile(top=10)))
def test_any_text_gives_documents_or_a_yaml_error(text: str) -> None:
    _check_documents(text, _documents(text))


@FUZZ
@given(
    st.one_of(
        st.binary(max_size=300),
        TEXTS.map(_encode),
        TEXTS.map(lambda text: b"\xef\xbb\xbf" + _encode(text)),
        TEXTS.map(lambda text: text.encode("utf-16", "surrogatepass")),
    )
)
def test_any_file_gives_claims_and_rejections_never_an_exception(content: bytes) -> None:
    state = _load(content)
    assert all(r.file == FILE and r.message and r.fix for r in state.rejections)
    assert all(c.location.file == FILE for c in state.claims)
    try:
        documents = load_documents(content.decode("utf-8-sig"), LIMITS)
    except (UnicodeDecodeError, YamlError):  # the whole file is refused, in one rejection
        assert not state.claims
        assert len(state.rejections) == 1
        return
    claimed = [claim.location.document for claim in state.claims]
    refused = {rejection.document for rejection in state.rejections}
    assert len(set(claimed)) == len(claimed)
    assert not refused & set(claimed)
    # every document is a claim or refused, but an empty one, which is skipped
    assert {d.index for d in documents if d.value is not None} == {*claimed, *refused}


@FUZZ
@given(claim_files())
def test_files_as_people_write_them_load_as_written(file: ClaimFile) -> None:
    state = _load(file.text.encode())
    claims = {claim.location.document: claim for claim in state.claims}
    assert sorted(claims) == [doc.index for doc in file.claims], state.rejections
    for doc in file.claims:
        claim = claims[doc.index]
        assert claim.identity == doc.identity
        assert claim.body["spec"] == doc.spec
        assert claim.git_status == (doc.status if isinstance(doc.status, dict) else None)
    # the other documents are refused (or skipped when empty), each for itself
    assert all(r.document is not None and r.document not in claims for r in state.rejections)
    assert len(load_documents(file.text, LIMITS)) == file.documents


@settings(FUZZ, max_examples=40)
@given(hostile())
def test_hostile_files_are_refused_within_bounded_memory_and_time(text: str) -> None:
    with bounded() as peak:
        outcome = _documents(text)
    assert peak() < MEMORY_BOUND, f"{peak() >> 20} MiB"
    _check_documents(text, outcome)
    content = _encode(text)
    with bounded() as peak:
        state = _load(content)
    assert peak() < MEMORY_BOUND, f"{peak() >> 20} MiB"
    assert not state.claims  # no hostile text names an exported kind
    if len(content) > LIMITS.max_file_bytes:
        assert [r.document for r in state.rejections] == [None]  # refused unread
    elif isinstance(outcome, YamlError):
        assert len(state.rejections) == 1  # the file, or the document that broke it


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" + "a, " * 349_000 + "a]", id="a megabyte of scalars in one flow list"),
        pytest.param("[" * (1 << 20), id="a megabyte of nesting"),
    ],
)
def test_the_largest_files_are_refused_within_bounded_memory_and_time(text: str) -> None:
    assert len(text) <= LIMITS.max_file_bytes
    with bounded() as peak:
        state = _load(text.encode())
    assert peak() < MEMORY_BOUND, f"{peak() >> 20} MiB"
    assert [r.document for r in state.rejections] == [0]
