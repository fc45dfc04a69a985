"""set_status edits one document's status and leaves every other byte of a person's file alone."""

from __future__ import annotations

import json

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.yamledit import load_all, set_status

CLAIMS = """\
# Team database claims
---
apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: orders   # the orders DB
  namespace: shop
spec:
  service: "a9s-postgresql13"
  plan: 'postgresql-single-nano'
  tags: [a, "b c"]
  # expose later
status:
  phase: Pending
  # old comment

# about the next one
---
# second claim
apiVersion: anynines.com/v1
kind: ServiceBinding
metadata: {name: orders-binding, namespace: shop}
spec:
  instanceRef: orders
"""
HEAD, _, REST = CLAIMS.partition("status:\n  phase: Pending\n  # old comment\n")
READY = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}
READY_BLOCK = """\
status:
  phase: Ready
  conditions:
  - type: Ready
    status: 'True'
"""


def test_replace_keeps_everything_else() -> None:
    assert set_status(CLAIMS, 0, READY) == HEAD + READY_BLOCK + REST


def test_insert_at_the_end_of_the_document() -> None:
    assert set_status(CLAIMS, 1, READY) == CLAIMS + READY_BLOCK


def test_remove() -> None:
    assert set_status(CLAIMS, 0, None) == HEAD + REST


def test_nothing_to_do_returns_the_text() -> None:
    assert set_status(CLAIMS, 0, {"phase": "Pending"}) == CLAIMS
    assert set_status(CLAIMS, 1, None) == CLAIMS


def test_status_in_the_middle_of_a_document() -> None:
    text = "kind: A  # k\nstatus: {old: 1}\n\n# spec follows\nspec:\n  x: '1'\n"
    assert set_status(text, 0, {"new": 2}) == (
        "kind: A  # k\nstatus:\n  new: 2\n\n# spec follows\nspec:\n  x: '1'\n"
    )
    assert set_status(text, 0, None) == "kind: A  # k\n\n# spec follows\nspec:\n  x: '1'\n"


def test_single_document_without_separator() -> None:
    assert set_status("kind: A\nspec: {}\n", 0, {"ok": True}) == (
        "kind: A\nspec: {}\nstatus:\n  ok: true\n"
    )


def test_no_trailing_newline_stays_absent() -> None:
    assert set_status("kind: A\nspec: 1", 0, {"a": 1}) == "kind: A\nspec: 1\nstatus:\n  a: 1"
    assert set_status("kind: A\nstatus:\n  a: 1", 0, {"a": 2}) == "kind: A\nstatus:\n  a: 2"
    assert set_status("kind: A\nstatus:\n  a: 1", 0, None) == "kind: A"
    assert set_status("a: 1\n---\nkind: B\n# end", 1, {"a": 1}) == (
        "a: 1\n---\nkind: B\nstatus:\n  a: 1\n# end"
    )


def test_document_end_markers_and_directives_stay() -> None:
    text = "%YAML 1.2\n---\nkind: A\n...\n---\nkind: B\n...\n"
    assert set_status(text, 0, {"a": 1}) == (
        "%YAML 1.2\n---\nkind: A\nstatus:\n  a: 1\n...\n---\nkind: B\n...\n"
    )
    assert set_status(text, 1, {"a": 1}) == (
        "%YAML 1.2\n---\nkind: A\n...\n---\nkind: B\nstatus:\n  a: 1\n...\n"
    )


def test_crlf() -> None:
    text = "kind: A\r\nspec:\r\n  a: 1\r\n---\r\nkind: B\r\n"
    assert set_status(text, 0, {"l": [1]}) == (
        "kind: A\r\nspec:\r\n  a: 1\r\nstatus:\r\n  l:\r\n  - 1\r\n---\r\nkind: B\r\n"
    )


def test_follows_the_documents_indentation() -> None:
    text = "kind: A\nspec:\n    plan: x\n    tags:\n      - a\n"
    assert set_status(text, 0, {"c": [{"t": 1}], "m": {"k": "v"}}) == text + (
        "status:\n    c:\n      - t: 1\n    m:\n        k: v\n"
    )


def test_strings_a_yaml_11_reader_would_misread_are_quoted() -> None:
    edited = set_status("kind: A\n", 0, {"a": "yes", "b": "on", "c": "0123", "d": "null"})
    assert yaml.safe_load(edited)["status"] == {"a": "yes", "b": "on", "c": "0123", "d": "null"}


def test_floats_are_written_so_that_a_yaml_11_reader_reads_floats() -> None:
    # Regression: 1e+20 was written as it is, which YAML 1.1 (the loader) reads as a string.
    status = {"big": 1e20, "small": 1e-07, "plain": 1.5}
    edited = set_status("kind: A\n", 0, status)
    assert edited == "kind: A\nstatus:\n  big: 1.0e+20\n  small: 1.0e-07\n  plain: 1.5\n"
    assert yaml.safe_load(edited)["status"] == status
    assert load_all(edited)[0]["status"] == status


def test_a_byte_order_mark_stays_and_does_not_hide_a_first_line_status() -> None:
    # Regression: a status on the first line of a file with a BOM "did not start its own line".
    text = "\ufeffstatus: {phase: Pending}\nkind: A\n"
    assert set_status(text, 0, {"phase": "Ready"}) == "\ufeffstatus:\n  phase: Ready\nkind: A\n"
    assert set_status(text, 0, None) == "\ufeffkind: A\n"
    assert set_status(text, 0, {"phase": "Pending"}) == text


def test_refuses_what_it_cannot_splice() -> None:
    with pytest.raises(ValueError, match="not a block mapping"):
        set_status("{kind: A, status: {}}\n", 0, {"a": 1})
    with pytest.raises(ValueError, match="not a mapping"):
        set_status("kind: A\n---\n- x\n", 1, {"a": 1})
    with pytest.raises(ValueError, match="not a mapping"):
        set_status("kind: A\n", 1, {"a": 1})


def test_safety_net_refuses_a_change_to_the_value_after_the_insertion_point() -> None:
    # A kept block scalar owns the blank lines after it; inserting there would change it.
    with pytest.raises(ValueError, match="would change more than its status"):
        set_status("kind: A\nnote: |+\n  x\n\n", 0, {"a": 1})


KEYS = st.from_regex(r"[a-z][a-zA-Z0-9]{0,8}", fullmatch=True)
SCALARS = st.one_of(st.text(max_size=20), st.integers(), st.booleans())
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.dictionaries(KEYS, inner, max_size=4) | st.lists(inner, max_size=3),
    max_leaves=12,
)
STATUSES = st.dictionaries(KEYS, VALUES, min_size=1, max_size=4)
COMMENTS = st.lists(st.from_regex(r"# [ -~]{0,20}", fullmatch=True), max_size=3)


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    name=KEYS,
    spec=st.dictionaries(KEYS, VALUES, max_size=4),
    old=st.one_of(st.none(), STATUSES),
    new=st.one_of(st.none(), STATUSES),
    before=COMMENTS,
    after=COMMENTS,
    flow=st.booleans(),
)
def test_property_only_status_changes(name, spec, old, new, before, after, flow) -> None:
    claim = {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": spec,
    }
    if old is not None:
        claim["status"] = old
    body = yaml.safe_dump(
        claim, sort_keys=False, default_flow_style=flow or None, allow_unicode=True
    )
    if flow:  # a block mapping at the top, flow values inside
        body = "".join(f"{k}: {json.dumps(v)}\n" for k, v in claim.items())
    prefix = "".join(f"{c}\n" for c in before) + "kind: Other\nmetadata: {name: x}\n---\n"
    suffix = "".join(f"{c}\n" for c in after) + "---\n# last\nkind: Last\n"
    text = prefix + body + suffix

    edited = set_status(text, 1, new)

    docs, original = load_all(edited), load_all(text)
    assert docs[1].get("status") == new
    assert docs[1]["spec"] == original[1]["spec"]
    assert edited.startswith(prefix)
    assert edited.endswith(suffix)
