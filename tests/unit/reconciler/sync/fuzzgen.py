"""Hypothesis strategies for the fuzz tests: claim files as people write them (with what the loader
must read from them), statuses as clusters report them, and text meant to exhaust a YAML reader.

A claim file is rendered by hand rather than dumped by a library, so that it has the layouts no
dumper writes: comments anywhere, flow and block styles mixed, quoted and block scalars, anchors,
aliases and merge keys, indentless sequences, ``---`` and ``...``, CRLF, a BOM, no final newline.
Each rendering also returns the value it stands for, so that the tests know what the loader must
read, and where each claim's ``status:`` lines are, so that they can tell them from the rest.
"""

from __future__ import annotations

import copy
import re
import signal
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any

import yaml
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from klutch_gitops.yamlsafe import load_documents
from reconciler.manifests import Export, Identity
from reconciler.sync.desired import Limits

GROUP = "anynines.com"
API_VERSION = f"{GROUP}/v1"
KINDS = ("PostgresqlInstance", "ServiceBinding")
EXPORTS = {
    (GROUP, kind): Export(GROUP, kind, f"{kind.lower()}s", "Namespaced", {"v1": {"type": "object"}})
    for kind in KINDS
}
LIMITS = Limits()
# Reproducible in CI (the same examples on every run) and nothing written into the work tree.
FUZZ = settings(
    database=None,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
# Hostile input is refused within these, with the production Limits. They are safety guards far
# above what it takes (at most ~55 MiB and ~4 s under tracemalloc for a 1 MiB file of 100,000
# nodes), not performance checks: they fail a run that blows up, not one on a busy machine.
MEMORY_BOUND = 96 << 20
TIME_GUARD = 30.0

Draw = Callable[[st.SearchStrategy[Any]], Any]
_RESOLVER = yaml.resolver.Resolver()  # PyYAML's implicit types, which the loader reads by
_STR = "tag:yaml.org,2002:str"
_PLAIN = re.compile(r"[^\W\d_](?:[\w.\-/+()= ]*[\w.)/])?")  # starts with a letter, no edge spaces
_NAME = re.compile(r"[a-z0-9][-a-z0-9.]*")  # object names, which may start with a digit
# Plain scalars whose type YAML 1.1 (the loader) and YAML 1.2 (the write-back's parser) disagree
# on, or that only YAML 1.1 gives a type: the loader's reading of each is what the tests expect.
ODD_PLAIN = (
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "~",
    "Null",
    "1_000",
    "0o17",
    "017",
    "0x1F",
    "0b101",
    "1e3",
    "1.5e3",
    "1.5e+3",
    "-.Inf",
    "12:30:45",
    "2024-05-01",
    "2001-12-14t21:59:43.10-05:00",
    "+12",
    "-0",
    "1.",
)
# Valid object names that YAML 1.2 would read as numbers and YAML 1.1 reads as text.
ODD_NAMES = ("1e3", "0o17", "1e-3", "0b2", "1-2", "0x1g")


@dataclass(frozen=True)
class Raw:
    """A plain scalar written as it is; the loader's reading of it is the expected value."""

    text: str

    @property
    def value(self) -> Any:
        return load_documents(f"v: {self.text}\n", LIMITS)[0].value["v"]


@dataclass(frozen=True)
class ClaimDoc:
    """One claim document of a generated file, with what the loader must read from it."""

    index: int  # among the file's documents
    identity: Identity
    spec: Any
    status: Any  # the value of its status key; None when it has none
    # text[start:end] holds its status lines (start == end: none yet), counted as if the text
    # ended with a line break
    slot: tuple[int, int]


@dataclass(frozen=True)
class ClaimFile:
    text: str
    documents: int  # how many YAML documents the file holds
    claims: tuple[ClaimDoc, ...]


class Overrun(BaseException):
    """Raised by ``bounded`` when time is up. Not an Exception: the loader turns every Exception
    into a YamlError, and a hang must fail the test, not pass as a refusal."""


@contextmanager
def bounded(seconds: float = TIME_GUARD) -> Iterator[Callable[[], int]]:
    """Raise Overrun in the block after ``seconds``; yield a function that gives, after the
    block, the peak of the Python memory it allocated (tracemalloc: libyaml's C buffers, linear in
    the file's size, are not counted). Restores an outer SIGALRM timer, such as pytest-timeout's.
    """

    def expire(signum: int, frame: FrameType | None) -> None:
        raise Overrun(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    started = time.monotonic()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    peak = [0]
    try:
        yield lambda: peak[0]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        peak[0] = tracemalloc.get_traced_memory()[1] - base
        if not tracing:
            tracemalloc.stop()
        signal.signal(signal.SIGALRM, previous)
        if outer:
            signal.setitimer(signal.ITIMER_REAL, max(outer - time.monotonic() + started, 0.001))


def _printable(text: str) -> bool:
    """Characters that every YAML reader here takes raw inside a quoted scalar or a comment."""
    return all(c == "\t" or c.isprintable() for c in text)


def _plain_ok(text: str) -> bool:
    return bool(
        (_PLAIN.fullmatch(text) or _NAME.fullmatch(text))
        and ": " not in text
        and " #" not in text
        and _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) == _STR
    )


def _single(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _double(text: str, raw_unicode: bool) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in '"\\':
            out.append("\\" + char)
        elif 0x20 <= code <= 0x7E or (raw_unicode and code > 0x7F and char.isprintable()):
            out.append(char)
        elif code <= 0xFF:
            out.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _yaml11_float(number: float) -> str:
    """A finite float as YAML 1.1 reads it back: an exponent needs a dot in the mantissa."""
    text = repr(number)
    return text.replace("e", ".0e", 1) if "e" in text and "." not in text else text


def _literal_ok(text: str) -> bool:
    body = text.removesuffix("\n")
    return bool(
        body
        and not body.endswith("\n")
        and body[0] not in " \t"
        and all(
            line == "" or (line[0] not in " \t" and _printable(line)) for line in body.split("\n")
        )
    )


def _folded_ok(text: str) -> bool:
    body = text.removesuffix("\n")
    words = body.split(" ")
    return all(word and _printable(word) and not any(c.isspace() for c in word) for word in words)


class _Writer:
    """Renders values as YAML in one document's randomly drawn style.

    ``define`` and ``refer`` say whether anchors may be set and aliases (and merge keys) used:
    only in a claim's spec and status, so that its identity stays plain, and only set in the
    spec, so that replacing the status never removes an anchor that something else refers to.
    """

    def __init__(self, draw: Draw, comments: bool) -> None:
        self.draw = draw
        self.indent = draw(st.sampled_from((2, 2, 4, 3)))
        self.offset = draw(st.sampled_from((0, self.indent)))  # a sequence's dash below its key
        self.comments = comments
        self.raw_unicode = draw(st.booleans())
        self.anchors: list[tuple[str, Any]] = []  # (name, value), once the anchored node is done
        self.named = 0
        self.define = self.refer = True

    def chance(self, tenths: int) -> bool:
        return self.draw(st.integers(0, 9)) < tenths

    def comment(self) -> str:
        text = self.draw(st.text(st.characters(codec="utf-8"), max_size=16))
        return "#" + "".join(c for c in text if c.isprintable())

    def trailing(self) -> str:
        return f" {self.comment()}" if self.comments and self.chance(2) else ""

    def gap(self, column: int) -> list[str]:
        """Blank and comment lines before an entry; never deeper than the entry, so that they
        cannot fall into a block scalar above."""
        if not self.comments or not self.chance(3):
            return []
        count = self.draw(st.integers(1, 2))
        return [
            "" if self.chance(4) else " " * self.draw(st.integers(0, column)) + self.comment()
            for _ in range(count)
        ]

    # Scalars

    def key(self, key: str) -> str:
        if _plain_ok(key) and self.chance(8):
            return key
        if "\n" not in key and _printable(key) and self.chance(5):
            return _single(key)
        return _double(key, self.raw_unicode)

    def inline(self, value: Any, flow: bool) -> tuple[str, Any]:
        """A scalar on one line: plain, quoted or (in block context) an odd plain token."""
        if isinstance(value, Raw):
            return (value.text, value.value) if not flow else (_single(value.text), value.text)
        if value is None:
            return self.draw(st.sampled_from(("null", "~", "Null", "NULL"))), None
        if isinstance(value, bool):
            spellings = ("true", "True", "yes", "on") if value else ("false", "False", "no", "off")
            return self.draw(st.sampled_from(spellings)), value
        if isinstance(value, int):
            spellings = [str(value)] + ([f"0x{value:x}", f"+{value}"] if value > 0 else [])
            return self.draw(st.sampled_from(spellings)), value
        if isinstance(value, float):
            return _yaml11_float(value), value
        if _plain_ok(value) and self.chance(7):
            return value, value
        if "\n" not in value and "\r" not in value and _printable(value) and self.chance(5):
            return _single(value), value
        return _double(value, self.raw_unicode), value

    def block_scalar(self, value: str, column: int) -> list[str] | None:
        """A literal or folded block scalar's lines, its header first; None when it has none."""
        content = " " * column
        if "\n" in value.removesuffix("\n") and _literal_ok(value):
            header = "|" if value.endswith("\n") else "|-"
            lines = value.removesuffix("\n").split("\n")
            return [header, *(content + line if line else "" for line in lines)]
        if _folded_ok(value) and self.chance(4):
            header = ">" if value.endswith("\n") else ">-"
            words = value.removesuffix("\n").split(" ")
            lines, line = [], [words[0]]
            for word in words[1:]:
                if self.chance(5):
                    lines.append(" ".join(line))
                    line = [word]
                else:
                    line.append(word)
            return [header, *(content + text for text in [*lines, " ".join(line)])]
        return None

    # Collections

    def flow(self, value: Any) -> tuple[str, Any]:
        if isinstance(value, dict):
            items = [(self.key(k), *self.flow(v)) for k, v in value.items()]
            text = ", ".join(f"{k}: {v}" for k, v, _ in items)
            return "{" + text + "}", {k: e for k, (_, _, e) in zip(value, items, strict=True)}
        if isinstance(value, list):
            items = [self.flow(v) for v in value]
            return "[" + ", ".join(text for text, _ in items) + "]", [e for _, e in items]
        return self.inline(value, flow=True)

    def after_indicator(self, value: Any, column: int, compact: bool) -> tuple[list[str], Any]:
        """What follows ``key:`` or ``-``: the first element continues that line, the rest are
        lines of their own. ``column`` is where a nested block collection starts."""
        anchor = ""
        if self.refer and self.anchors and self.chance(1):
            name, expected = self.draw(st.sampled_from(self.anchors))
            return [f" *{name}{self.trailing()}"], copy.deepcopy(expected)
        if self.define and self.chance(1):
            anchor = f" &a{self.named}"
            self.named += 1
        if isinstance(value, dict | list) and value and not self.chance(2):
            lines, expected = self.block(value, column)
            if compact and not anchor:  # "- key: value" and "- - item"
                first = [" " + lines[0][column:], *lines[1:]]
            else:
                first = [anchor + self.trailing(), *lines]
        elif isinstance(value, dict | list):
            text, expected = self.flow(value)
            first = [f"{anchor} {text}{self.trailing()}"]
        elif isinstance(value, str) and (block := self.block_scalar(value, column)):
            first, expected = [f"{anchor} {block[0]}{self.trailing()}", *block[1:]], value
        elif value is None and not compact and self.chance(3):
            first, expected = [anchor + self.trailing()], None
        else:
            text, expected = self.inline(value, flow=False)
            first = [f"{anchor} {text}{self.trailing()}"]
        if anchor:
            self.anchors.append((anchor.strip()[1:], expected))
        return first, expected

    def block(self, value: dict[str, Any] | list[Any], column: int) -> tuple[list[str], Any]:
        """A non-empty block mapping or sequence whose entries start at ``column``."""
        pad = " " * column
        lines: list[str] = []
        if isinstance(value, list):
            items = []
            for position, item in enumerate(value):
                lines += self.gap(column) if position else []
                first, expected = self.after_indicator(item, column + 2, compact=True)
                lines += [f"{pad}-{first[0]}", *first[1:]]
                items.append(expected)
            return lines, items
        mapping: dict[str, Any] = {}
        entries: list[tuple[str, Any] | str] = list(value.items())  # a str: a merge key's alias
        merge = [(n, e) for n, e in self.anchors if isinstance(e, dict) and self.refer]
        if merge and "<<" not in value and self.chance(1):
            name, merged = self.draw(st.sampled_from(merge))
            entries.insert(self.draw(st.integers(0, len(entries))), name)
            mapping.update(copy.deepcopy(merged))  # the mapping's own keys win, whatever the order
        for position, entry in enumerate(entries):
            lines += self.gap(column) if position else []
            if isinstance(entry, str):
                lines.append(f"{pad}<<: *{entry}")
            else:
                pair, mapping[entry[0]] = self.pair(*entry, column)
                lines += pair
        return lines, mapping

    def pair(self, key: str, value: Any, column: int) -> tuple[list[str], Any]:
        """One entry of a block mapping whose keys start at ``column``."""
        nested = column + (self.offset if isinstance(value, list) else self.indent)
        first, expected = self.after_indicator(value, nested, compact=False)
        return [f"{' ' * column}{self.key(key)}:{first[0]}", *first[1:]], expected

    def entry(self, key: str, value: Any, column: int) -> tuple[list[str], Any]:
        """A top-level entry: its lines, and sometimes a comment that belongs to it."""
        lines, expected = self.pair(key, value, column)
        if self.comments and self.chance(1):
            lines.append(" " * (column + 1) + self.comment())
        return lines, expected


# Values


def _words(alphabet: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.lists(st.text(alphabet, min_size=1, max_size=8), min_size=1, max_size=5).map(" ".join)


LETTERS = st.characters(categories=("L", "N"), codec="utf-8")
KEYS = st.one_of(
    st.from_regex(r"[a-z][a-zA-Z0-9]{0,10}", fullmatch=True),
    st.text(st.characters(codec="utf-8"), max_size=10),
)
MULTILINE = (
    st.lists(_words(LETTERS), min_size=1, max_size=4)
    .map("\n".join)
    .flatmap(lambda text: st.sampled_from((text, text + "\n")))
)
TEXT = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True),
    _words(LETTERS),
    st.text(st.characters(codec="utf-8"), max_size=20),
    MULTILINE,
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    st.sampled_from(ODD_PLAIN).map(Raw),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(KEYS, inner, max_size=4),
    max_leaves=16,
)
# What a cluster reports: JSON, with any text, which the write-back must quote so that it reads
# back the same.
JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**63), 2**63),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(st.characters(codec="utf-8"), max_size=20),
    ),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3),
    max_leaves=12,
)
CONDITIONS = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(("Ready", "Synced")),
            "status": st.sampled_from(("True", "False", "Unknown")),
            "lastTransitionTime": st.just("2024-05-01T10:00:00Z"),
        },
        optional={"reason": TEXT, "message": TEXT},
    ),
    max_size=3,
)
STATUSES = st.one_of(
    st.dictionaries(KEYS, JSON, max_size=5),
    st.fixed_dictionaries({"conditions": CONDITIONS}, optional={"phase": TEXT, "extra": JSON}),
)
NAMES = st.one_of(
    st.from_regex(r"[a-z0-9]([-a-z0-9]{0,14}[a-z0-9])?(\.[a-z0-9]{1,5})?", fullmatch=True),
    st.sampled_from(ODD_NAMES),
)


# Documents and files


def _claim_entries(draw: Draw, name: str) -> list[tuple[str, Any]]:
    kind = draw(st.sampled_from(KINDS))
    metadata: dict[str, Any] = {"name": name, "namespace": draw(st.sampled_from(("team-a", "b")))}
    metadata |= draw(
        st.fixed_dictionaries(
            {},
            optional={
                "labels": st.dictionaries(KEYS, TEXT, max_size=3),
                "annotations": st.dictionaries(KEYS, TEXT, max_size=3),
                "resourceVersion": st.just("123"),
            },
        )
    )
    spec = draw(st.dictionaries(KEYS, VALUES, max_size=5))
    entries = [("apiVersion", API_VERSION), ("kind", kind), ("metadata", metadata), ("spec", spec)]
    if draw(st.booleans()):
        status = draw(st.one_of(st.none(), STATUSES))
        entries.insert(draw(st.integers(0, len(entries))), ("status", status))
    return entries


_OTHERS = ("config", "list", "scalar", "empty")


def _other_document(draw: Draw, writer: _Writer, shape: str) -> list[str]:
    """A document that is not a claim: refused, or skipped when empty."""
    if shape == "config":
        value = {"apiVersion": "v1", "kind": "ConfigMap", "data": draw(VALUES)}
        return writer.block(value, 0)[0]
    if shape == "list":
        return writer.block(draw(st.lists(VALUES, min_size=1, max_size=3)), 0)[0]
    if shape == "scalar":
        return [writer.inline(draw(TEXT), flow=False)[0]]
    return writer.gap(0)


@st.composite
def claim_files(draw: Draw, max_claims: int = 3) -> ClaimFile:
    """A file of one to ``max_claims`` claims between other documents, in any layout the loader
    must accept; each claim's status (if any) is one entry among its top-level keys."""
    comments = draw(st.booleans())
    names = draw(st.lists(NAMES, min_size=1, max_size=max_claims, unique=True))
    others = draw(st.lists(st.sampled_from(_OTHERS), max_size=2))
    documents = [*(("claim", name) for name in names), *(("other", shape) for shape in others)]
    newline = draw(st.sampled_from(("\n", "\n", "\r\n")))
    lines: list[str] = []  # without line breaks
    found: list[tuple[int, dict[str, Any], int, int]] = []  # index, values, status lines
    for index, (what, name) in enumerate(draw(st.permutations(documents))):
        writer = _Writer(draw, comments)
        lines += ["..."] if index and draw(st.integers(0, 9)) == 0 else []  # ends the one before
        lines += [] if index else writer.gap(0)
        if index or name == "empty" or draw(st.booleans()):
            lines.append("---" + writer.trailing())
        if what == "other":
            lines += _other_document(draw, writer, name)
            continue
        column = draw(st.sampled_from((0, 0, 0, 2)))
        values: dict[str, Any] = {}
        slot = None
        for position, (key, value) in enumerate(_claim_entries(draw, name)):
            lines += writer.gap(column) if position else []
            writer.define, writer.refer = key == "spec", key in ("spec", "status")
            start = len(lines)
            entry, values[key] = writer.entry(key, value, column)
            lines += entry
            slot = (start, len(lines)) if key == "status" else slot
        found.append((index, values, *(slot or (len(lines), len(lines)))))
        lines += writer.gap(column)
    lines += ["..."] if draw(st.integers(0, 9)) == 0 else []
    bom = "\ufeff" if draw(st.integers(0, 9)) == 0 else ""
    text = bom + "".join(line + newline for line in lines)
    if draw(st.integers(0, 9)) == 0:
        text = text.removesuffix(newline)
    offsets = [len(bom)]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + len(newline))
    claims = tuple(
        ClaimDoc(
            index,
            Identity(
                GROUP, values["kind"], values["metadata"]["namespace"], values["metadata"]["name"]
            ),
            values["spec"],
            values.get("status"),
            (offsets[start], offsets[end]),
        )
        for index, values, start, end in found
    )
    return ClaimFile(text, len(names) + len(others), claims)


# Hostile text


def _sizes(top: int) -> st.SearchStrategy[int]:
    """Log-uniform: mostly small, now and then at or beyond the limits."""
    return st.integers(0, top).map(lambda exponent: 2**exponent)


def _nest(opening: str, closing: str, top: int) -> st.SearchStrategy[str]:
    def text(n: int, closed: bool) -> str:
        return opening * n + "x" + (closing * n if closed else "")

    return st.builds(text, _sizes(min(18, top)), st.booleans())


def _bomb(width: int, levels: int, flow: bool) -> str:
    lines = ["l0: &l0 " + ("[" + ", ".join(["lol"] * width) + "]" if flow else "lol")]
    for level in range(1, levels):
        aliases = [f"*l{level - 1}"] * width
        if flow:
            lines.append(f"l{level}: &l{level} [" + ", ".join(aliases) + "]")
        else:
            lines.append(f"l{level}: &l{level}\n" + "".join(f"  - {a}\n" for a in aliases))
    return "\n".join(lines) + "\n"


def _merge_bomb(width: int, levels: int) -> str:
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: {i}" for i in range(width)) + "}"]
    for level in range(1, levels):
        merged = ", ".join([f"*m{level - 1}"] * width)
        lines.append(f"m{level}: &m{level} {{<<: [{merged}], x{level}: 1}}")
    return "\n".join(lines) + "\n"


def _huge_scalar(size: int, style: str) -> str:
    body = "x" * size
    return {
        "plain": f"a: {body}\n",
        "single": f"a: '{body}'\n",
        "double": f'a: "{body}"\n',
        "escaped": 'a: "' + "\\u00e9" * (size // 6 + 1) + '"\n',
        "literal": "a: |\n" + f"  {body[:80]}\n" * (size // 80 + 1),
        "key": f"{body}: 1\n",
        "anchor": f"a: &{body} 1\nb: *{body}\n",
        "comment": f"a: 1 # {body}\n",
        "tag": f"a: !{body} 1\n",
        "binary": f"a: !!binary {'QUJD' * (size // 4 + 1)}\n",
    }[style]


_HUGE_STYLES = [
    "plain",
    "single",
    "double",
    "escaped",
    "literal",
    "key",
    "anchor",
    "comment",
    "tag",
    "binary",
]


def hostile(top: int = 20) -> st.SearchStrategy[str]:
    """Text that a YAML reader may choke on, its repetitions up to 2**top (1 MiB at 20)."""
    return st.one_of(
        _nest("[", "]", top),
        _nest("{a: ", "}", top),
        _nest("- ", "", top),
        _nest("? ", "", top),
        _nest("!!seq [", "]", top),
        _sizes(min(11, top)).map(lambda n: "".join(f"{' ' * i}a:\n" for i in range(n))),
        st.builds(_bomb, st.integers(2, 12), st.integers(2, 12), st.booleans()),
        st.builds(_merge_bomb, st.integers(1, 40), st.integers(2, 40)),
        st.sampled_from(("a: &a [1, *a]\n", "&a {b: *a}\n", "a: &a\n  b: *a\n", "*a\n", "&a [*a]")),
        st.builds(_huge_scalar, _sizes(min(20, top)), st.sampled_from(_HUGE_STYLES)),
        _sizes(min(12, top)).map(lambda n: "---\n" * n),
        _sizes(min(12, top)).map(lambda n: "a: 1\n---\n" * n),
        _sizes(min(19, top)).map(lambda n: "[" + "a," * n + "a]"),
        _sizes(min(18, top)).map(lambda n: "- a\n" * n),
        _sizes(min(17, top)).map(lambda n: "".join(f"k{i}: v\n" for i in range(n))),
        _sizes(min(17, top)).map(lambda n: "".join(f"a{i}: &a{i} {i}\n" for i in range(n))),
        _sizes(min(17, top)).map(
            lambda n: "a: !!set {" + ", ".join(f"k{i}" for i in range(n)) + "}\n"
        ),
        _sizes(min(16, top)).map(
            lambda n: "a: !!omap [" + ", ".join(f"k{i}: 1" for i in range(n)) + "]\n"
        ),
        st.sampled_from(
            (
                "a: !!python/object/apply:os.system ['true']\n",
                "a: !!python/name:os.system\n",
                "!!python/object/new:type ['x', [], {}]\n",
                "a: !!int 0x\n",
                "a: !!float x\n",
                "a: !!timestamp 2024-13-45\n",
                "a: =\n",
                "? [a, b]\n: c\n",
                "? {a: b}\n: c\n",
                "%YAML 2.0\n---\na: 1\n",
                "%TAG ! tag:x,2000:\n--- !a 1\n",
                "a: 1\n\x00",
                "a: \ud800\n",
                "a: \x1b[31m\n",
            )
        ),
    )


def mutations(texts: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """``texts`` with a few spans deleted or repeated, and YAML's special characters put in."""
    special = st.sampled_from([*"-?:,[]{}#&*!|>'\"%@`\t\r\n\\ ", "---", "...", "\ufeff"])

    @st.composite
    def mutate(draw: Draw) -> str:
        text = draw(texts)
        for _ in range(draw(st.integers(1, 4))):
            start = draw(st.integers(0, len(text)))
            end = draw(st.integers(start, min(len(text), start + 8)))
            operation = draw(st.sampled_from(("delete", "repeat", "insert")))
            if operation == "delete":
                text = text[:start] + text[end:]
            elif operation == "repeat":
                text = text[:end] + text[start:end] * draw(st.integers(1, 3)) + text[end:]
            else:
                text = text[:start] + draw(special) + text[start:]
        return text

    return mutate()
