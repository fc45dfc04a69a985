"""Incremental desired state: a push's load re-reads only the files ``git diff`` names.

A repository's passes load Git's desired state after every new commit; parsing every file each
time makes a one-file push cost what the whole repository costs. ``IncrementalLoader`` keeps each
file's result (claims and refusals) with the commit they came from, asks git which files changed
since, reads only those and assembles the state again (first definition wins over the merged
results, as a full load does). Unchanged files keep their very ``Claim`` objects, so later stages
can tell an unchanged claim by identity. Whenever the diff cannot be trusted the loader reads
everything: no earlier load, other exports or binding, a failed diff, a symlink or unreadable
folder anywhere under the path (a link's target changes without its own path changing), a bound
path that is a file or is reached through a symlink, a changed path that is or passes a symlink.
"""

from __future__ import annotations

import posixpath
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Protocol

from reconciler.manifests import Export
from reconciler.sync.claim_rules import Rules
from reconciler.sync.desired import (
    DesiredState,
    FileResult,
    Limits,
    assemble,
    folder_of,
    load_file,
)
from reconciler.sync.yaml_files import SKIPPED_DIRECTORIES, is_yaml_name, walk

DEFAULT_LIMITS = Limits()


class Tree(Protocol):
    """The checkout the loader reads (``reconciler.git.checkout.Checkout``)."""

    root: Path

    def changed_files(self, old: str, new: str, folder: str) -> list[str] | None: ...


@dataclass
class _Loaded:
    commit: str
    key: Hashable  # the exports, path, namespaces and limits the results were read with
    top: Path
    results: dict[str, FileResult]  # repository path -> that file's claims and refusals


class IncrementalLoader:
    """One repository's desired state, kept between loads and brought forward by diffs."""

    def __init__(self) -> None:
        self._last: _Loaded | None = None
        self.files_read = 0  # by the last load: what it cost
        self.full = True  # whether the last load read every file

    def load(
        self,
        tree: Tree,
        commit: str,
        path: str,
        exports: Mapping[tuple[str, str], Export],
        allowed_namespaces: frozenset[str] | None,
        exports_key: Hashable,
        limits: Limits = DEFAULT_LIMITS,
    ) -> DesiredState:
        """The desired state of ``path`` at ``commit`` (the tree's work tree holds it), the same
        as ``load_desired`` gives; ``exports_key`` changes whenever ``exports`` do."""
        root = tree.root.resolve()
        folder = posixpath.normpath(path.strip() or ".")
        key = (exports_key, folder, allowed_namespaces, limits)
        rules = Rules(exports, allowed_namespaces)
        top = folder_of(root, path)
        last, self._last = self._last, None
        if isinstance(top, DesiredState):
            self.files_read, self.full = 0, True
            return top
        changed = _changed(tree, root, last, (commit, key), top, root / folder)
        if changed is None or last is None:
            return self._full(root, top, commit, key, rules, limits)
        results = last.results
        for name in changed:
            results.pop(name, None)
            if _read(root, top, name):
                results[name] = load_file(name, root / name, rules, limits)
        self._last = _Loaded(commit, key, top, results)
        self.files_read, self.full = len(changed), False
        return assemble([], (results[name] for name in sorted(results)))

    def _full(
        self, root: Path, top: Path, commit: str, key: Hashable, rules: Rules, limits: Limits
    ) -> DesiredState:
        found = walk(root, top)
        results = {name: load_file(name, file, rules, limits) for name, file in found.files}
        if not (found.linked or found.rejections or top.is_file()):
            self._last = _Loaded(commit, key, top, results)
        self.files_read, self.full = len(results), True
        return assemble(found.rejections, (results[name] for name, _ in found.files))


def _changed(
    tree: Tree,
    root: Path,
    last: _Loaded | None,
    wanted: tuple[str, Hashable],
    top: Path,
    lexical: Path,
) -> list[str] | None:
    """The repository paths to read again for ``wanted`` (commit, key), or None when only a
    full load is right. ``lexical``: the bound path before symlinks are resolved."""
    commit, key = wanted
    if last is None or last.key != key or last.top != top or top != lexical or top.is_file():
        return None
    if last.commit == commit:
        return []
    changed = tree.changed_files(last.commit, commit, top.relative_to(root).as_posix())
    if changed is None or any(_linked(root, top, name) for name in changed):
        return None
    return changed


def _linked(root: Path, top: Path, name: str) -> bool:
    """Whether a changed path, or a folder on its way below ``top``, is a symlink now."""
    path = root / name
    while path != top and path.is_relative_to(top):
        if path.is_symlink():
            return True
        path = path.parent
    return False


def _read(root: Path, top: Path, name: str) -> bool:
    """Whether a full walk of ``top`` reads the file ``name``: a regular YAML file, not under a
    folder the walk skips (given that no symlink lies on its way)."""
    parts = PurePosixPath(name).relative_to(top.relative_to(root).as_posix()).parts
    return (
        bool(parts)
        and not SKIPPED_DIRECTORIES.intersection(parts)
        and is_yaml_name(parts[-1])
        and (root / name).is_file()
    )
