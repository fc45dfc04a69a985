"""Desired state: the claims that a folder of a repository asks for, and why any other document
was refused.

Pure logic over a work tree: no cluster, no network. It never raises for bad input, because one bad
file must not stop a repository: every problem becomes a ``Rejection`` naming the file, document,
field and fix, and everything else still loads. Of two definitions of one object the first wins
and stays a claim, so adding a copy can never take a live data service away.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klutch_gitops.yamlsafe import YamlError, load_documents
from reconciler.manifests import Claim, Export, Identity, Location, Rejection
from reconciler.sync.claim_rules import Rules, document_problems
from reconciler.sync.yaml_files import Unreadable, read_text, yaml_files

SERVER_METADATA = frozenset(
    {
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "generation",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
    }
)


@dataclass(frozen=True)
class Limits:
    """What one file may cost to read; beyond it the file or the document is refused."""

    max_file_bytes: int = 1 << 20  # files over this are rejected whole
    max_documents: int = 1000  # per file
    max_nodes: int = 100_000  # YAML nodes per document after alias expansion (alias bombs)
    max_depth: int = 64  # nesting depth


@dataclass(frozen=True)
class DesiredState:
    claims: tuple[Claim, ...]  # sorted by (file, document)
    rejections: tuple[Rejection, ...]  # sorted by (file, document)


FileResult = tuple[list[Claim], list[Rejection]]  # one file's claims and refusals


def load_desired(
    root: Path,
    path: str,
    exports: Mapping[tuple[str, str], Export],
    allowed_namespaces: frozenset[str] | None = None,
    limits: Limits = Limits(),
) -> DesiredState:
    """The claims under ``root/path`` and every rejection, both sorted by (file, document).

    root: the repository work tree; path: folder inside it ("" or "." = whole repo);
    exports: keyed by (group, kind); allowed_namespaces: None = any namespace.
    """
    root = root.resolve()
    top = folder_of(root, path)
    if isinstance(top, DesiredState):
        return top
    rules = Rules(exports, allowed_namespaces)
    files, rejections = yaml_files(root, top)
    return assemble(rejections, [load_file(name, file, rules, limits) for name, file in files])


def folder_of(root: Path, path: str) -> Path | DesiredState:
    """The folder (or file) ``path`` names in the resolved work tree ``root``, or the refusal
    when it is no folder of the repository."""
    folder = posixpath.normpath(path.strip() or ".")
    try:
        top = Path(os.path.realpath(root / folder))
    except ValueError:  # a NUL byte
        return _refused(
            folder,
            f"the path {folder!r} is not a valid folder name",
            "Bind a folder inside the repository.",
        )
    if not top.is_relative_to(root):
        return _refused(
            folder,
            f"the path {folder} leaves the repository",
            "Bind a folder inside the repository.",
        )
    if not top.exists():
        return _refused(
            folder,
            f"the folder {folder} does not exist in the repository",
            "Create it, or bind the repository with the folder that holds the claims.",
        )
    return top


def assemble(walked: list[Rejection], results: Iterable[FileResult]) -> DesiredState:
    """The desired state of the files' results in file order, after the walk's own refusals:
    the first definition of an object wins across all of them."""
    loaded: list[Claim] = []
    rejections = list(walked)
    for claims, refused in results:
        loaded += claims
        rejections += refused
    claims, duplicates = _first_definitions(loaded)
    rejections += duplicates
    rejections.sort(key=lambda r: (r.file, -1 if r.document is None else r.document))
    return DesiredState(tuple(claims), tuple(rejections))


def _refused(file: str, message: str, fix: str) -> DesiredState:
    return DesiredState((), (Rejection(file, message, fix),))


def load_file(name: str, file: Path, rules: Rules, limits: Limits) -> FileResult:
    """One file's claims and refusals (``name``: its repository path, ``file``: what to read)."""
    try:
        documents = load_documents(read_text(file, limits.max_file_bytes), limits)
    except Unreadable as error:
        return [], [Rejection(name, error.message, error.fix)]
    except YamlError as error:
        return [], [Rejection(name, error.message, error.fix, error.document)]
    claims: list[Claim] = []
    rejections: list[Rejection] = []
    for document in documents:
        if document.value is None:
            continue
        problems = document_problems(document.value, rules)
        identity = _named(document.value)
        rejections += [
            Rejection(name, p.message, p.fix, document.index, p.field, identity) for p in problems
        ]
        if not problems:
            claims.append(_claim(document.value, Location(name, document.index, document.line)))
    return claims, rejections


def _named(value: object) -> Identity | None:
    """The object a rejected document names, if it names one: pruning must spare it."""
    if not isinstance(value, Mapping):
        return None
    identity = Identity.of(value)
    return identity if identity.kind and identity.name else None


def _claim(obj: dict[str, Any], location: Location) -> Claim:
    """The document as the object to apply: without status and the fields the server owns."""
    body = {key: value for key, value in obj.items() if key != "status"}
    body["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_METADATA}
    status = obj.get("status")
    return Claim(
        Identity.of(obj),
        obj["apiVersion"],
        body,
        location,
        status if isinstance(status, Mapping) else None,
    )


def _first_definitions(claims: list[Claim]) -> tuple[list[Claim], list[Rejection]]:
    """Keep the first claim of each identity; refuse every later copy, naming the first."""
    first: dict[Identity, Claim] = {}
    kept: list[Claim] = []
    rejections: list[Rejection] = []
    for claim in claims:
        original = first.setdefault(claim.identity, claim)
        if original is claim:
            kept.append(claim)
            continue
        rejections.append(
            Rejection(
                claim.location.file,
                f"{claim.identity} is already defined in {original.location}; an object may be "
                "defined only once",
                f"Remove this copy or give it another metadata.name; the definition in "
                f"{original.location.file} stays in effect.",
                claim.location.document,
                "metadata.name",
            )
        )
    return kept, rejections
