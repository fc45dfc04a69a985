"""The YAML files of a repository folder, found and read without leaving the repository.

A linked folder is never followed, a linked file only when it stays inside the repository and out
of .git and .klutch, and no file is read beyond the size limit: every problem is a ``Rejection``
or an ``Unreadable`` for the loader to report, never an exception that stops a repository.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from reconciler.manifests import Rejection

YAML_SUFFIXES = (".yaml", ".yml")
SKIPPED_DIRECTORIES = frozenset({".git", ".klutch"})


class Unreadable(Exception):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


@dataclass(frozen=True)
class Walk:
    """What one walk found; ``linked``: a symlink lies under the folder, whose target can change
    without its own path changing (an incremental load cannot trust a diff then)."""

    files: list[tuple[str, Path]]
    rejections: list[Rejection]
    linked: bool


def yaml_files(root: Path, top: Path) -> tuple[list[tuple[str, Path]], list[Rejection]]:
    """Every YAML file under ``top`` as (repository path, path to read), sorted by repository path.

    Walks with an explicit stack (no recursion limit to hit) and never follows a linked folder.
    """
    found = walk(root, top)
    return found.files, found.rejections


def walk(root: Path, top: Path) -> Walk:
    """``yaml_files``, and whether the folder holds any symlink."""
    if top.is_file():
        return Walk([(top.relative_to(root).as_posix(), top)], [], top.is_symlink())
    files: list[tuple[str, Path]] = []
    rejections: list[Rejection] = []
    linked = False
    folders = [top]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as error:
            rejections.append(
                Rejection(
                    folder.relative_to(root).as_posix(),
                    f"cannot read the folder: {error.strerror}",
                    "Check the folder's permissions.",
                )
            )
            continue
        for entry in entries:
            if entry.name in SKIPPED_DIRECTORIES:
                continue
            path = Path(entry.path)
            name = path.relative_to(root).as_posix()
            if entry.is_symlink():
                linked = True
                followed = _follow(root, path, name)
                if isinstance(followed, Rejection):
                    rejections.append(followed)
                elif followed is not None:
                    files.append((name, followed))
            elif entry.is_dir(follow_symlinks=False):
                folders.append(path)
            elif is_yaml_name(entry.name) and entry.is_file(follow_symlinks=False):
                files.append((name, path))
    return Walk(sorted(files), rejections, linked)


def is_yaml_name(name: str) -> bool:
    """Whether a file of this name is read as YAML."""
    return name.endswith(YAML_SUFFIXES)


def _follow(root: Path, link: Path, name: str) -> Path | Rejection | None:
    """The file a symlink leads to, a Rejection when it must not be read, or None to skip it."""
    target = Path(os.path.realpath(link))
    inside = target.is_relative_to(root)
    if target.is_dir():
        return (
            None
            if inside
            else Rejection(
                name,
                "symlink leaves the repository; linked folders are never followed",
                "Copy the folder into the repository instead of linking to it.",
            )
        )
    if not name.endswith(YAML_SUFFIXES):
        return None
    if not inside:
        return Rejection(
            name,
            "symlink leaves the repository",
            "Replace the symlink with the file itself; files outside the repository "
            "are never read.",
        )
    if SKIPPED_DIRECTORIES.intersection(target.relative_to(root).parts):
        return Rejection(
            name,
            "symlink points into .git or .klutch, which are never read",
            "Replace the symlink with the file itself.",
        )
    if not target.is_file():
        return Rejection(
            name,
            "symlink points to a file that does not exist",
            "Correct the symlink's target or remove the symlink.",
        )
    return target


def read_text(file: Path, limit: int) -> str:
    """The file's text; never reads more than ``limit`` + 1 bytes. Raises Unreadable."""
    try:
        with file.open("rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            data = b"" if size > limit else stream.read(limit + 1)
    except OSError as error:
        raise Unreadable(
            f"cannot read the file: {error.strerror}", "Check the file's permissions."
        ) from None
    if max(size, len(data)) > limit:
        raise Unreadable(
            f"the file has {max(size, len(data))} bytes, more than the limit of {limit}",
            "Split it into smaller files.",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise Unreadable(
            f"the file is not UTF-8 text: byte 0x{data[error.start]:02x} at line {line}",
            "Save the file as UTF-8.",
        ) from None
