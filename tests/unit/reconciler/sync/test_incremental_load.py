"""The incremental loader (reconciler/sync/changes.py) gives exactly what a full load gives, over
random sequences of pushes: edits, renames, deletes, the same object defined in two files,
refused documents, files in skipped folders, symlinks; and a one-file push reads one file."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from reconciler.git.checkout import Checkout
from reconciler.sync.changes import IncrementalLoader
from reconciler.sync.desired import load_desired
from tests.unit.reconciler.sync.test_desired import ALLOWED, EXPORTS, binding, documents, postgres

FILES = (
    "claims/a.yaml",
    "claims/b.yaml",
    "claims/sub/c.yml",
    "claims/sub/deep/d.yaml",
    "claims/.klutch/status/e.yaml",
    "claims/notes.txt",
    "claims/z.yaml",
    "outside/f.yaml",
    "g.yaml",
)
CONTENTS = (
    documents(postgres("db1")),
    documents(postgres("db2")),
    documents(postgres("db1", plan="postgresql-replica-small")),  # a copy: first one wins
    documents(postgres("db2", plan="postgresql-single-big")),  # refused: not a plan
    documents(postgres("db3"), binding("db3-binding")),
    documents(postgres("db4", namespace="team-z")),  # refused: namespace not allowed
    "apiVersion: [unclosed\n",  # refused: not YAML
    "",
    documents({**postgres("db2"), "status": {"phase": "Ready"}}),
)


class Repo:
    """A person's clone that pushes, and the reconciler's Checkout that fetches."""

    def __init__(self, tmp: Path) -> None:
        self.origin, self.work = tmp / "origin.git", tmp / "work"
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(self.origin)], check=True)
        subprocess.run(["git", "init", "-q", "-b", "main", str(self.work)], check=True)
        self.push()
        self.reader = Checkout.open_or_clone(str(self.origin), "main", tmp / "reader")

    def git(self, *args: str) -> None:
        subprocess.run(["git", *args], cwd=self.work, check=True, capture_output=True)

    def push(self) -> str | None:
        self.git("add", "-A")
        self.git(
            "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-q", "--allow-empty", "-m", "x"
        )
        self.git("push", "-q", str(self.origin), "main")
        return getattr(self, "reader", None) and self.reader.fetch()

    def write(self, name: str, text: str) -> None:
        path = self.work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink():
            path.unlink()
        path.write_text(text)

    def present(self) -> list[str]:
        return [f for f in FILES if (self.work / f).exists() or (self.work / f).is_symlink()]


def change(repo: Repo, rng: random.Random) -> None:
    """One random change of the work tree: write, delete, rename or link a file."""
    present = repo.present()
    op = rng.choice(("write", "write", "write", "delete", "rename", "link"))
    if op == "delete" and present:
        (repo.work / rng.choice(present)).unlink()
    elif op == "rename" and present:
        source, target = rng.choice(present), rng.choice(FILES)
        if source != target and not (repo.work / target).exists():
            (repo.work / target).parent.mkdir(parents=True, exist_ok=True)
            (repo.work / source).rename(repo.work / target)
    elif op == "link" and rng.random() < 0.3:
        link = repo.work / "claims/link.yaml"
        if link.is_symlink():
            link.unlink()
        else:
            link.symlink_to("a.yaml")
    else:
        repo.write(rng.choice(FILES), rng.choice(CONTENTS))


@pytest.mark.parametrize("path", ["claims", ""])
@pytest.mark.parametrize("seed", range(4))
def test_incremental_loads_equal_full_loads(tmp_path: Path, seed: int, path: str) -> None:
    """Property: after every push, incremental == a full load of the same work tree."""
    rng = random.Random(seed)  # noqa: S311 - a reproducible sequence, not a secret
    repo = Repo(tmp_path)
    loader = IncrementalLoader()
    fallbacks = 0
    for _ in range(30):
        for _ in range(rng.randint(1, 3)):
            change(repo, rng)
        head = repo.push()
        assert head is not None
        got = loader.load(repo.reader, head, path, EXPORTS, ALLOWED, "exports-v1")
        fallbacks += loader.full
        assert got == load_desired(repo.reader.root, path, EXPORTS, ALLOWED)
    print(f"seed {seed} path {path!r}: {fallbacks} of 30 loads read everything")


def test_a_one_file_push_reads_one_file_and_keeps_the_other_claims(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    for index in range(20):
        repo.write(f"claims/db{index}.yaml", documents(postgres(f"db{index}")))
    loader = IncrementalLoader()
    first = loader.load(repo.reader, repo.push() or "", "claims", EXPORTS, ALLOWED, "v1")
    assert loader.full
    repo.write("claims/db3.yaml", documents(postgres("db3", plan="postgresql-replica-small")))
    second = loader.load(repo.reader, repo.push() or "", "claims", EXPORTS, ALLOWED, "v1")
    assert (loader.full, loader.files_read) == (False, 1)
    kept = [a is b for a, b in zip(first.claims, second.claims, strict=True)]
    assert kept == [c.identity.name != "db3" for c in first.claims]


def test_other_exports_or_another_path_read_everything_again(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    repo.write("claims/db.yaml", documents(postgres("db")))
    head = repo.push() or ""
    loader = IncrementalLoader()
    loader.load(repo.reader, head, "claims", EXPORTS, ALLOWED, "v1")
    loader.load(repo.reader, head, "claims", EXPORTS, ALLOWED, "v1")
    assert (loader.full, loader.files_read) == (False, 0)
    loader.load(repo.reader, head, "claims", EXPORTS, ALLOWED, "v2")
    assert loader.full
    loader.load(repo.reader, head, ".", EXPORTS, ALLOWED, "v2")
    assert loader.full


def test_a_commit_git_does_not_have_reads_everything(tmp_path: Path) -> None:
    repo = Repo(tmp_path)
    assert repo.reader.changed_files("0" * 40, repo.reader.head or "", ".") is None
    repo.write("claims/old.yaml", documents(postgres("db")))
    before = repo.push() or ""
    (repo.work / "claims/old.yaml").rename(repo.work / "claims/new.yaml")
    after = repo.push() or ""
    assert sorted(repo.reader.changed_files(before, after, "claims") or []) == [
        "claims/new.yaml",
        "claims/old.yaml",
    ]
