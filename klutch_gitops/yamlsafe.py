"""Safe, bounded YAML: a file's text to plain documents, each with the line it starts on.

Files come from repositories that anyone with push access controls, so reading them must be safe
(no arbitrary Python tags), bounded (alias bombs, deep nesting, document floods) and must fail in
one way only: ``YamlError``, carrying the line and document a person needs to find the mistake.

libyaml (``CSafeLoader``) parses when available, but nodes are composed by PyYAML's Python
``Composer`` on top of libyaml's events: libyaml's own composer recurses in C and crashes the
process on deeply nested input (100,000 ``[`` are a segfault), while the Python one lets us stop at
``max_depth`` while composing. Each document's node graph is then measured with every alias
expanded (memoised per node, so a billion-laughs document is caught in linear time) before
anything is constructed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import yaml
from yaml.composer import Composer
from yaml.nodes import CollectionNode, MappingNode, Node, ScalarNode

_MERGE = "tag:yaml.org,2002:merge"
_SYNTAX_FIX = "Fix the YAML at that line; an editor with YAML support or yamllint shows the spot."


class DocumentLimits(Protocol):
    """The bounds a file must stay within (``reconciler.sync.desired.Limits`` is one)."""

    @property
    def max_documents(self) -> int: ...
    @property
    def max_nodes(self) -> int: ...
    @property
    def max_depth(self) -> int: ...


@dataclass(frozen=True)
class Document:
    """One YAML document: its 0-based index in the file and the 1-based line its content starts."""

    index: int
    line: int
    value: Any  # dict, list, str, int, float, bool or None, nested; no shared references


class YamlError(Exception):
    """Text that is not YAML we accept; ``line`` (1-based) and ``document`` (0-based) when known."""

    def __init__(
        self,
        message: str,
        line: int | None = None,
        document: int | None = None,
        fix: str = _SYNTAX_FIX,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.line = line
        self.document = document
        self.fix = fix


class _Refused(Exception):
    """A bound exceeded inside one document; becomes a YamlError once its index is attached."""

    def __init__(self, message: str, line: int, fix: str) -> None:
        super().__init__(message)
        self.message, self.line, self.fix = message, line, fix


_Base: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# The base is chosen at import time, so mypy cannot know it: what this module takes from it is
# annotated where it is used.
class _Loader(_Base, Composer):  # type: ignore[misc]
    """Safe constructors, libyaml's parser, PyYAML's Python composer with depth and size bounds.

    Nodes are counted while composing, aliases included, so that a large flat document costs at
    most ``max_nodes`` nodes of memory before it is refused, not one per scalar of the file.
    """

    check_node = Composer.check_node  # not libyaml's: see the module docstring
    get_node = Composer.get_node

    def __init__(self, text: str, limits: DocumentLimits) -> None:
        _Base.__init__(self, text)
        Composer.__init__(self)
        self._max_depth = limits.max_depth
        self._max_nodes = limits.max_nodes
        self._depth = 0
        self._nodes = 0

    def compose_document(self) -> Node | None:
        self._nodes = 0
        return super().compose_document()

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self._depth >= self._max_depth:
            raise _Refused(*_too_deep(self._max_depth, self._line()))
        # An alias counts once here and in full in _measure, so this never refuses what the
        # measure after composing would accept.
        self._nodes += 1
        if self._nodes > self._max_nodes:
            line = self._line()
            raise _Refused(
                f"the document has more than {self._max_nodes} YAML nodes (line {line})",
                line,
                "Split it into several documents or files.",
            )
        self._depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def _line(self) -> int:
        line: int = self.peek_event().start_mark.line
        return line + 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Refuse a key given twice in one mapping: readers disagree on which value wins
        (PyYAML takes the last, the write-back's YAML 1.2 parser and ``kubectl`` refuse it)."""
        seen: dict[tuple[str, str], int] = {}
        for key, _ in node.value:
            if not isinstance(key, ScalarNode) or key.tag == _MERGE:
                continue
            line = key.start_mark.line + 1
            if (key.tag, key.value) in seen:
                raise _Refused(
                    f"the key {key.value!r} appears twice in one mapping (lines "
                    f"{seen[key.tag, key.value]} and {line})",
                    line,
                    "Keep one of them.",
                )
            seen[key.tag, key.value] = line
        mapping: dict[Any, Any] = super().construct_mapping(node, deep)
        return mapping


def _as_text(loader: _Loader, node: Node) -> str:
    text: str = loader.construct_scalar(node)
    return text


# Kubernetes reads YAML as JSON: timestamps and binary stay strings, sets become mappings with
# null values and ordered maps lists of one-key mappings, instead of date, bytes, set or tuples.
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _as_text)
_Loader.add_constructor("tag:yaml.org,2002:binary", _as_text)
_Loader.add_constructor("tag:yaml.org,2002:set", yaml.SafeLoader.construct_yaml_map)
_Loader.add_constructor("tag:yaml.org,2002:omap", yaml.SafeLoader.construct_yaml_seq)
_Loader.add_constructor("tag:yaml.org,2002:pairs", yaml.SafeLoader.construct_yaml_seq)


def load_documents(text: str, limits: DocumentLimits) -> list[Document]:
    """Every document of ``text``, in order; raises YamlError and nothing else.

    The text's own size is the caller's to bound (the loader refuses large files unread).
    """
    documents: list[Document] = []
    line: int | None = None
    try:
        loader = _Loader(text, limits)
        try:
            while loader.check_node():
                line = loader.peek_event().start_mark.line + 1
                if len(documents) == limits.max_documents:
                    raise YamlError(
                        f"the file has more than {limits.max_documents} YAML documents "
                        f"(document {limits.max_documents + 1} starts at line {line})",
                        line,
                        None,
                        "Split it into several files.",
                    )
                node = loader.get_node()
                assert node is not None  # check_node() said a document follows
                line = node.start_mark.line + 1
                shared = _measure(node, limits.max_nodes, limits.max_depth)
                value = loader.construct_document(node)
                documents.append(
                    Document(len(documents), line, _unshare(value) if shared else value)
                )
        finally:
            loader.dispose()
    except YamlError:
        raise
    except _Refused as refused:
        raise YamlError(refused.message, refused.line, len(documents), refused.fix) from None
    except yaml.MarkedYAMLError as error:
        raise _syntax_error(error, len(documents)) from None
    except yaml.reader.ReaderError as error:
        line = _line_of(text, error.character) or line
        raise YamlError(
            f"character U+{error.character:04X} at line {line} is not allowed in "
            f"YAML ({error.reason})",
            line,
            len(documents),
            "Remove the control character; YAML files hold printable text.",
        ) from None
    except Exception as error:  # PyYAML's constructors raise built-in errors on explicit tags
        where = f" in the document at line {line}" if line else ""
        raise YamlError(f"invalid YAML{where}: {error}", line, len(documents)) from None
    return documents


def _syntax_error(error: yaml.MarkedYAMLError, document: int) -> YamlError:
    mark = error.problem_mark or error.context_mark
    line = mark.line + 1 if mark else None
    where = f" at line {line}, column {mark.column + 1}" if mark else ""
    problem = error.problem or error.context or "invalid syntax"
    if error.problem and error.context:
        context_line = f" at line {error.context_mark.line + 1}" if error.context_mark else ""
        problem = f"{error.context}{context_line}, {error.problem}"
    return YamlError(f"invalid YAML{where}: {problem}", line, document)


def _line_of(text: str, character: int) -> int | None:
    position = text.find(chr(character))
    return text.count("\n", 0, position) + 1 if position >= 0 else None


def _too_deep(max_depth: int, line: int) -> tuple[str, int, str]:
    return (
        f"the document at line {line} nests deeper than {max_depth} levels",
        line,
        "Flatten the document; a Kubernetes object never needs this much nesting.",
    )


@dataclass(slots=True)
class _Frame:
    """A collection node being measured: its nested collections still to visit, its totals."""

    node: CollectionNode
    nested: Iterator[CollectionNode]
    size: int
    height: int

    @classmethod
    def of(cls, node: CollectionNode) -> _Frame:
        """Scalars are counted at once; only nested collections are walked."""
        items = (
            [n for pair in node.value for n in pair]
            if isinstance(node, MappingNode)
            else node.value
        )
        nested = [item for item in items if isinstance(item, CollectionNode)]
        scalars = len(items) - len(nested)
        return cls(node, iter(nested), 1 + scalars, 2 if scalars else 1)

    def add(self, size: int, height: int) -> None:
        self.size += size
        self.height = max(self.height, height + 1)


def _measure(root: Node, max_nodes: int, max_depth: int) -> bool:
    """Check ``root``'s size and depth with every alias expanded, as construction will see them.

    Walks iteratively with totals memoised per node, so each distinct node is visited once however
    often it is aliased. Returns whether any node is reached twice (its values would be shared).
    """
    if not isinstance(root, CollectionNode):
        return False
    measured: dict[int, tuple[int, int]] = {}
    open_nodes = {id(root)}
    stack = [_Frame.of(root)]
    shared = False
    while stack:
        top = stack[-1]
        child = next(top.nested, None)
        if child is None:
            stack.pop()
            open_nodes.discard(id(top.node))
            measured[id(top.node)] = (top.size, top.height)
            if stack:  # else top is the root, whose own scalars may already be too many
                stack[-1].add(top.size, top.height)
                top = stack[-1]
        elif id(child) in measured:
            shared = True
            top.add(*measured[id(child)])
        elif id(child) in open_nodes:
            line = child.start_mark.line + 1
            raise _Refused(
                f"recursive alias at line {line}: a node contains an alias of itself",
                line,
                "Remove the alias; Kubernetes objects cannot be recursive.",
            )
        else:
            open_nodes.add(id(child))
            stack.append(top := _Frame.of(child))
        if top.size > max_nodes:
            line = top.node.start_mark.line + 1
            raise _Refused(
                f"the document expands to more than {max_nodes} YAML nodes at line {line} when "
                "its aliases are expanded (an alias bomb, like 'billion laughs')",
                line,
                "Write the content out instead of multiplying it with anchors (&) and aliases "
                "(*), or split the document.",
            )
        if len(stack) - 1 + top.height > max_depth:
            raise _Refused(*_too_deep(max_depth, top.node.start_mark.line + 1))
    return shared


def _unshare(value: Any) -> Any:
    """A copy in which no dict or list appears twice, so editing one place never edits another."""
    if isinstance(value, dict):
        return {key: _unshare(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_unshare(item) for item in value]
    return value
