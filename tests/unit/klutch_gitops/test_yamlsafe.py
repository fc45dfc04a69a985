"""Safe, bounded YAML: documents with their lines, and one error type for everything else."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from klutch_gitops.yamlsafe import Document, YamlError, _measure, _Refused, load_documents
from reconciler.sync.desired import Limits

LIMITS = Limits()
BILLION_LAUGHS = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10)}]\n"
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_documents_carry_index_and_first_content_line() -> None:
    text = "# header\n---\na: 1\n---\n\n---\n# comment\nb:\n  - x\n"
    assert load_documents(text, LIMITS) == [
        Document(0, 3, {"a": 1}),
        Document(1, 6, None),
        Document(2, 8, {"b": ["x"]}),
    ]


def test_values_are_json_like() -> None:
    text = (
        "when: 2024-05-01T10:00:00Z\nday: 2024-05-01\nblob: !!binary aGVsbG8=\n"
        "set: !!set {a, b}\nordered: !!omap [{x: 1}, {y: 2}]\nyes: on\n"
    )
    (document,) = load_documents(text, LIMITS)
    assert document.value == {
        "when": "2024-05-01T10:00:00Z",
        "day": "2024-05-01",
        "blob": "aGVsbG8=",
        "set": {"a": None, "b": None},
        "ordered": [{"x": 1}, {"y": 2}],
        True: True,  # YAML 1.1, like the Kubernetes YAML reader
    }


def test_aliases_and_merge_keys_are_expanded_into_separate_copies() -> None:
    (document,) = load_documents("base: &b {x: [1]}\ncopy: *b\nmerged: {<<: *b, y: 2}\n", LIMITS)
    value = document.value
    assert value == {"base": {"x": [1]}, "copy": {"x": [1]}, "merged": {"x": [1], "y": 2}}
    value["copy"]["x"].append(2)
    assert value["base"] == {"x": [1]}
    assert value["merged"]["x"] == [1]


def test_invalid_yaml_names_line_and_document() -> None:
    with pytest.raises(YamlError) as caught:
        load_documents("a: 1\n---\nb: 2\n---\nc: [1, 2\nd: 3\n", LIMITS)
    assert caught.value.document == 2
    assert caught.value.line == 6
    assert "line 6" in caught.value.message
    assert "invalid YAML" in str(caught.value)


def test_billion_laughs_is_refused_without_expanding_it() -> None:
    with pytest.raises(YamlError) as caught:
        load_documents(f"ok: 1\n---\n{BILLION_LAUGHS}", LIMITS)
    assert caught.value.document == 1
    assert "more than 100000 YAML nodes" in caught.value.message
    assert "alias" in caught.value.fix


def test_node_limit_counts_every_alias_expansion() -> None:
    text = "a: &a [1, 2, 3, 4]\nb: [*a, *a, *a, *a]\n"  # root, 2 keys, 5 for a, 1 + 4 * 5 for b
    assert load_documents(text, Limits(max_nodes=29))
    with pytest.raises(YamlError, match="more than 28 YAML nodes"):
        load_documents(text, Limits(max_nodes=28))


def test_deep_nesting_is_refused_not_a_crash() -> None:
    with pytest.raises(YamlError) as caught:
        load_documents("[" * 200_000, LIMITS)  # libyaml's own composer would segfault here
    assert "deeper than 64 levels" in caught.value.message
    assert caught.value.document == 0


def test_depth_counts_alias_expansion() -> None:
    deep = "[" * 40 + "x" + "]" * 40
    text = f"a: &a {deep}\nb: &b {'[' * 30}*a{']' * 30}\n"
    with pytest.raises(YamlError, match="deeper than 64 levels"):
        load_documents(text, LIMITS)
    assert load_documents(f"a: &a {deep}\nb: *a\n", LIMITS)


def test_recursive_alias_is_refused() -> None:
    with pytest.raises(YamlError, match="recursive alias"):
        load_documents("a: &a [1, *a]\n", LIMITS)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        pytest.param("[" + "a, " * 30 + "a]", 1, id="flow sequence"),
        pytest.param("".join(f"k{i}: v\n" for i in range(8)), 5, id="mapping"),
        pytest.param("- a\n" * 100, 10, id="block sequence"),
    ],
)
def test_a_flat_document_over_the_node_limit_is_refused_while_composing(
    text: str, line: int
) -> None:
    # Regression: a root's own scalars were never counted, and the limit was checked only once
    # the whole document had been composed (1 MiB of scalars took ~170 MiB before).
    with pytest.raises(YamlError) as caught:
        load_documents(text, Limits(max_nodes=10))
    assert "more than 10 YAML nodes" in caught.value.message
    assert caught.value.document == 0
    assert caught.value.line == line  # where the 11th node starts, not the end of the document


def test_the_node_measure_counts_the_roots_own_scalars() -> None:
    # Regression: the root's size was never compared with the limit.
    root = yaml.compose("[a, b, c, d]")
    with pytest.raises(_Refused, match="more than 4 YAML nodes"):
        _measure(root, max_nodes=4, max_depth=64)
    assert _measure(root, max_nodes=5, max_depth=64) is False


def test_too_many_documents_refuse_the_whole_file() -> None:
    with pytest.raises(YamlError) as caught:
        load_documents("a: 1\n---\n" * 4, Limits(max_documents=3))
    assert caught.value.document is None
    assert caught.value.line == 6  # its '---'
    assert "more than 3 YAML documents" in caught.value.message


@pytest.mark.parametrize(
    ("text", "fragment", "line"),
    [
        ("a: 1\nb: \x07\n", "U+0007", 2),
        ("a: !Ref thing\n", "could not determine a constructor for the tag '!Ref'", 1),
        ("a: !!python/object:os.system {}\n", "python/object", 1),
        ("a: !!int 0x\n", "invalid YAML", 1),
        ("? [a, b]\n: c\n", "unhashable", 1),
        ("a: 1\nc: *y\n", "found undefined alias 'y'", 2),
        ("a: &x 1\nb: &x 2\n", "found duplicate anchor 'x'; first occurrence at line 1", 2),
        ("a: 1\nb: 2\na: 3\n", "the key 'a' appears twice in one mapping (lines 1 and 3)", 3),
        ("s: {a: 1, 'a': 2}\n", "the key 'a' appears twice in one mapping (lines 1 and 1)", 1),
    ],
)
def test_every_failure_is_a_yaml_error(text: str, fragment: str, line: int) -> None:
    with pytest.raises(YamlError) as caught:
        load_documents(text, LIMITS)
    assert fragment in caught.value.message
    assert caught.value.line == line
    assert caught.value.document == 0


def test_text_that_cannot_be_encoded_is_a_yaml_error() -> None:
    with pytest.raises(YamlError, match="surrogates"):
        load_documents("a: \ud800\n", LIMITS)


def _plain(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_plain(k) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(item) for item in value)
    return value is None or isinstance(value, str | int | float | bool)


YAMLISH = st.text(alphabet="ab1 :-,[]{}&*!|>'\"#?%@`\n\t.=<~", max_size=300)


@settings(
    deadline=timedelta(seconds=2), max_examples=400, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.one_of(st.text(max_size=300), YAMLISH))
def test_any_text_gives_documents_or_a_yaml_error(text: str) -> None:
    outcome = _load_or_error(text)
    if isinstance(outcome, YamlError):
        assert outcome.message
        assert outcome.line is None or outcome.line >= 1
    else:
        assert [d.index for d in outcome] == list(range(len(outcome)))
        assert all(_plain(d.value) for d in outcome)


def _load_or_error(text: str) -> list[Document] | YamlError:
    """Anything but a YamlError escapes and fails the property."""
    try:
        return load_documents(text, Limits(max_nodes=500, max_depth=16))
    except YamlError as error:
        return error
