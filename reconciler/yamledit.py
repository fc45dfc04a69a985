"""Write one document's ``status:`` into a file that people edit, leaving every other byte alone.

Claims are written by hand, with comments and a layout of their own. A round trip through a YAML
library would reformat the whole file, so the edit is a textual splice: the parser only says
which lines hold the ``status`` key, a fresh block replaces exactly those, and a re-parse proves
that nothing but ``status`` changed before the result is returned.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml as pyyaml
from ruamel.yaml import YAML
from ruamel.yaml.events import (
    CollectionEndEvent,
    CollectionStartEvent,
    DocumentStartEvent,
    MappingStartEvent,
    NodeEvent,
    ScalarEvent,
    SequenceStartEvent,
)
from ruamel.yaml.representer import RoundTripRepresenter

STATUS = "status"
_MISSING = object()
_YAML11 = pyyaml.resolver.Resolver()
_STR = "tag:yaml.org,2002:str"


class _Representer(RoundTripRepresenter):
    """Quotes strings that a YAML 1.1 reader (PyYAML, Kubernetes) would take for something else,
    such as ``yes`` or ``on``, writes floats so that it reads them as floats, and spells null as
    ``null``."""

    def represent_str(self, data: str) -> Any:
        if any(c in data for c in "\x85\u2028\u2029"):
            style: str | None = '"'  # the emitter folds these as line breaks in other styles
        # types-PyYAML leaves Resolver.resolve unannotated
        elif _YAML11.resolve(pyyaml.ScalarNode, data, (True, False)) != _STR:  # type: ignore[no-untyped-call]
            style = "'"
        else:
            style = None
        return self.represent_scalar(_STR, data, style=style)

    def represent_float(self, data: float) -> Any:
        node = super().represent_float(data)
        if "e" in node.value and "." not in node.value:  # YAML 1.1 reads 1e+20 as a string
            node.value = node.value.replace("e", ".0e", 1)
        return node

    def represent_none(self, data: None) -> Any:
        return self.represent_scalar("tag:yaml.org,2002:null", "null")


_Representer.add_representer(str, _Representer.represent_str)
_Representer.add_representer(float, _Representer.represent_float)
_Representer.add_representer(type(None), _Representer.represent_none)


def load_all(text: str) -> list[Any]:
    """All documents of a file as plain values (YAML 1.2, duplicate keys refused)."""
    return list(YAML(typ="safe", pure=True).load_all(text))


def dump(data: Any, indent: int = 2, offset: int = 0) -> str:
    """Block-style YAML in the order given; ``offset`` is where a sequence's dash sits."""
    yaml = YAML()
    yaml.Representer = _Representer
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.indent(mapping=indent, sequence=offset + 2, offset=offset)
    out = io.StringIO()
    yaml.dump(_plain(data), out)
    return out.getvalue()


def set_status(text: str, document: int, status: Mapping[str, Any] | None) -> str:
    """``text`` with the top-level ``status`` of one document replaced, inserted at the end of
    the document, or removed (None). Equal status returns ``text`` as it is.

    Raises ValueError for a document that is missing or not a block mapping, and when the
    splice would change anything besides ``status``.
    """
    if text.startswith("\ufeff"):  # a byte order mark is not part of the first line
        return "\ufeff" + set_status(text[1:], document, status)
    docs = load_all(text)
    if not 0 <= document < len(docs) or not isinstance(docs[document], dict):
        raise ValueError(f"document {document} is not a mapping")
    wanted = _MISSING if status is None else _plain(status)
    if docs[document].get(STATUS, _MISSING) == wanted:
        return text
    layout = _layout(text, document)
    start, end = _status_span(text, layout, document)
    newline = "\r\n" if "\r\n" in text else "\n"
    block = "" if status is None else _block(wanted, layout, newline)
    edited = _splice(text, start, end, block, newline)
    _check(docs, load_all(edited), document, wanted)
    return edited


@dataclass
class _Frame:
    mapping: bool
    flow: bool
    parent_key_column: int | None  # set when this collection is the value of a block mapping key
    key_column: int | None = None
    want_key: bool = True


@dataclass
class _Layout:
    """Where a document's top-level keys start, where its mapping ends, how it is indented."""

    keys: list[tuple[str | None, int]] = field(default_factory=list)  # (key, index of its start)
    end: int = 0  # index of the token after the mapping
    column: int = 0  # column of the top-level keys
    indent: int | None = None
    offset: int | None = None


def _layout(text: str, document: int) -> _Layout:
    """Walk the parser's events for one document: where its top-level keys start, where its
    mapping ends, and how far its nested mappings and sequences are indented."""
    events = iter(YAML(typ="safe", pure=True).parse(text))
    starts = 0
    for event in events:
        starts += isinstance(event, DocumentStartEvent)
        if starts > document:
            break
    root = next(events)
    if not isinstance(root, MappingStartEvent) or root.flow_style:
        raise ValueError(f"document {document} is not a block mapping")
    layout = _Layout()
    stack = [_Frame(mapping=True, flow=False, parent_key_column=None)]
    while stack:
        event = next(events)
        if isinstance(event, CollectionEndEvent):
            stack.pop()
            layout.end = event.start_mark.index
            continue
        if not isinstance(event, NodeEvent):
            continue
        parent, column = stack[-1], event.start_mark.column
        block = parent.mapping and not parent.flow
        is_key, is_value = block and parent.want_key, block and not parent.want_key
        parent.want_key = parent.mapping and not parent.want_key
        if is_key:
            parent.key_column = column
            if len(stack) == 1:
                layout.column = layout.column if layout.keys else column
                name = event.value if isinstance(event, ScalarEvent) else None
                layout.keys.append((name, event.start_mark.index))
            elif parent.parent_key_column is not None and layout.indent is None:
                layout.indent = column - parent.parent_key_column
        if isinstance(event, CollectionStartEvent):
            sequence = isinstance(event, SequenceStartEvent) and not event.flow_style
            if is_value and sequence and layout.offset is None:
                layout.offset = column - (parent.key_column or 0)
            parent_key_column = parent.key_column if is_value else None
            stack.append(
                _Frame(
                    isinstance(event, MappingStartEvent), bool(event.flow_style), parent_key_column
                )
            )
    layout.indent = layout.indent if layout.indent and layout.indent > 0 else 2
    layout.offset = max(layout.offset or 0, 0)
    return layout


def _status_span(text: str, layout: _Layout, document: int) -> tuple[int, int]:
    """The whole lines holding ``status``, or the empty span where it goes when there is none."""
    names = [name for name, _ in layout.keys]
    if STATUS not in names:
        last = _line_start(text, layout.keys[-1][1])
        end = _trim(text, last, _boundary(text, layout.end), layout.column)
        return end, end
    i = names.index(STATUS)
    start = _line_start(text, layout.keys[i][1])
    if text[start : layout.keys[i][1]].strip():
        raise ValueError(f"document {document}: status does not start its own line")
    stop = layout.keys[i + 1][1] if i + 1 < len(layout.keys) else layout.end
    return start, _trim(text, start, _boundary(text, stop), layout.column)


def _block(status: Any, layout: _Layout, newline: str) -> str:
    lines = dump({STATUS: status}, layout.indent or 2, layout.offset or 0).split("\n")[:-1]
    return "".join(" " * layout.column + line + newline for line in lines)


def _line_start(text: str, index: int) -> int:
    return text.rfind("\n", 0, index) + 1


def _boundary(text: str, index: int) -> int:
    """The start of the line holding ``index`` when nothing precedes it there, else ``index``."""
    start = _line_start(text, index)
    return start if not text[start:index].strip() else index


def _trim(text: str, start: int, end: int, column: int) -> int:
    """Move ``end`` back over blank lines and comments at or left of ``column``: they belong to
    what follows, not to the block before them."""
    while end > start:
        line_start = max(start, _line_start(text, end - 1))
        line = text[line_start:end]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" \t"))
        if stripped and not (stripped.startswith("#") and indent <= column):
            break
        end = line_start
    return end


def _splice(text: str, start: int, end: int, block: str, newline: str) -> str:
    """Replace whole lines ``text[start:end]`` with ``block``, keeping a missing final newline
    missing."""
    if end < len(text) or text.endswith("\n"):
        return text[:start] + block + text[end:]
    if start == end:  # insertion after an unterminated last line
        return text + newline + block.removesuffix(newline)
    if block:
        return text[:start] + block.removesuffix(newline)
    head = text[:start]
    return head.removesuffix("\n").removesuffix("\r")


def _check(before: list[Any], after: list[Any], document: int, wanted: Any) -> None:
    """The safety net: only ``status`` of one document may differ."""
    old = dict(before[document])
    new = after[document] if len(after) == len(before) else None
    if isinstance(new, dict):
        new = dict(new)
        got = new.pop(STATUS, _MISSING)
        old.pop(STATUS, None)
        others = all(
            b == a for i, (b, a) in enumerate(zip(before, after, strict=True)) if i != document
        )
        if others and got == wanted and new == old:
            return
    raise ValueError(
        f"editing the status of document {document} would change more than its "
        "status; the file was left as it was"
    )


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):
        return [_plain(v) for v in value]
    return value
