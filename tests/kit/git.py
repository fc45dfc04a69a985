"""Git as the people and the bot use it: a bare remote, a person's clone, and the remote's
history read back (``commits``, ``duplicates``, ``lost``, ``touching``)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.config_file import defaults

PERSON = ("Human Developer", "human@example.com")  # the author of a person's commits
BOT = defaults().bot.name


def git(cwd: Path, *args: str) -> str:
    """Run git in ``cwd``; its output, stripped. CalledProcessError when it fails."""
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def new_remote(remote: Path) -> Path:
    """An empty bare repository whose default branch is main."""
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    return remote


def clone_as_person(source: str, clone: Path) -> None:
    """A clone of ``source`` whose commits a person (``PERSON``) authors."""
    subprocess.run(["git", "clone", "-q", source, str(clone)], check=True, capture_output=True)
    git(clone, "config", "user.name", PERSON[0])
    git(clone, "config", "user.email", PERSON[1])


def person_clone(
    source: str, clone: Path, files: Mapping[str, str] | None = None, message: str = "start"
) -> None:
    """A person's clone of an empty repository, with a first commit on main pushed: a README
    and ``files`` ({path: text})."""
    clone_as_person(source, clone)
    git(clone, "checkout", "-q", "-b", "main")
    for name, text in {"README.md": "team claims\n", **(files or {})}.items():
        path = clone / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", message)
    git(clone, "push", "-q", "origin", "main")


def remote_head(remote: Path, branch: str = "main") -> str:
    """The branch's commit, read from the ref file (a push writes loose refs) or git."""
    ref = remote / "refs" / "heads" / branch
    try:
        return ref.read_text().strip()
    except OSError:
        return git(remote, "rev-parse", branch)


def remote_file(remote: Path, name: str, ref: str = "main") -> str:
    """A file as ``ref`` holds it; CalledProcessError when it does not."""
    return git(remote, "show", f"{ref}:{name}")


@dataclass(frozen=True)
class Commit:
    sha: str
    author: str
    message: str
    files: tuple[str, ...]
    patch: str  # the change itself, without the commit's metadata

    @property
    def by_bot(self) -> bool:
        return self.author == BOT


def commits(remote: Path, ref: str = "main") -> list[Commit]:
    """The history of ``ref``, oldest first."""
    found = []
    for sha in git(remote, "rev-list", "--reverse", ref).split():
        author, _, message = git(remote, "show", "-s", "--format=%an%n%B", sha).partition("\n")
        files = git(remote, "show", "--format=", "--name-only", sha).split()
        patch = git(remote, "show", "--format=", "--patch", sha)
        found.append(Commit(sha, author, message, tuple(files), patch))
    return found


def duplicates(history: Iterable[Commit]) -> list[tuple[str, str]]:
    """Pairs of bot commits that say the same thing: equal message (source commit included)
    and equal change. A retried push or a restarted reconciler must never make one."""
    seen: dict[tuple[str, str], str] = {}
    pairs = []
    for commit in history:
        if not commit.by_bot:
            continue
        key = (commit.message, commit.patch)
        if key in seen:
            pairs.append((seen[key], commit.sha))
        seen.setdefault(key, commit.sha)
    return pairs


def lost(remote: Path, shas: Iterable[str], ref: str = "main") -> list[str]:
    """The commits of ``shas`` that ``ref`` does not contain."""
    history = set(git(remote, "rev-list", ref).split())
    return [sha for sha in shas if sha not in history]


def touching(history: Iterable[Commit], file: str) -> list[Commit]:
    """The bot commits that changed ``file``."""
    return [commit for commit in history if commit.by_bot and file in commit.files]
