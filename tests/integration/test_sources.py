"""Polling and file watching against real repositories made with the real ``git``."""

import queue
import subprocess
import time
from pathlib import Path

import pytest

from klutch_gitops.errors import KlutchError
from reconciler.git.remote import ls_remote
from reconciler.triggers.sources import FileWatcher, Poller

WAIT = 10.0  # upper bound for an expected event; never asserted as a duration
QUIET = 1.0  # how long "nothing happens" is observed


def git(*args: str, cwd: Path) -> str:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    result = subprocess.run(
        ["git", *identity, *args], cwd=cwd, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    """A bare repository with one commit on ``main``."""
    bare = tmp_path / "remote.git"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(bare), cwd=tmp_path)
    push_commit(tmp_path / "clone", bare, "initial")
    return bare


def push_commit(clone: Path, bare: Path, message: str, branch: str = "main") -> None:
    if not clone.exists():
        git("clone", "--quiet", bare.as_uri(), str(clone), cwd=bare.parent)
        git("checkout", "--quiet", "-B", "main", cwd=clone)
    git("commit", "--quiet", "--allow-empty", "-m", message, cwd=clone)
    git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=clone)


def next_event(events: "queue.Queue[str]", timeout: float = WAIT) -> str | None:
    try:
        return events.get(timeout=timeout)
    except queue.Empty:
        return None


def test_poller_fires_first_and_after_a_push_only(remote: Path, tmp_path: Path) -> None:
    events: queue.Queue[str] = queue.Queue()
    failures: list[str] = []
    asked: set[tuple[str, str]] = set()

    def recording_ls_remote(key: str, url: str, branch: str) -> str | None:
        asked.add((key, url))  # the key says whose credentials to poll with
        if "missing" in url:
            failures.append(url)
        return ls_remote(url, branch, timeout=10)

    poller: Poller[str] = Poller(0.2, recording_ls_remote, events.put)
    poller.watch("claims", remote.as_uri(), "main")
    poller.watch("broken", (tmp_path / "missing.git").as_uri(), "main")
    poller.start()
    try:
        assert next_event(events) == "claims"
        assert next_event(events, QUIET) is None  # several rounds, nothing new
        assert len(failures) >= 2  # the broken one kept failing without stopping the other

        push_commit(tmp_path / "clone", remote, "add a claim")
        assert next_event(events) == "claims"
        assert next_event(events, QUIET) is None

        poller.unwatch("claims")
        push_commit(tmp_path / "clone", remote, "not followed any more")
        assert next_event(events, QUIET) is None
    finally:
        started = time.monotonic()
        poller.stop()
    assert time.monotonic() - started < WAIT
    assert asked == {
        ("claims", remote.as_uri()),
        ("broken", (tmp_path / "missing.git").as_uri()),
    }


def test_file_watcher_fires_after_a_push_to_a_bare_repository(remote: Path, tmp_path: Path) -> None:
    events: queue.Queue[str] = queue.Queue()
    watcher: FileWatcher[str] = FileWatcher(events.put, debounce=0.05)
    watcher.watch("claims", remote)
    watcher.start()
    try:
        time.sleep(QUIET)  # the watch is set up by the watcher's thread
        assert next_event(events, QUIET) is None

        push_commit(tmp_path / "clone", remote, "add a claim")
        assert next_event(events) == "claims"

    finally:
        started = time.monotonic()
        watcher.stop()
    assert time.monotonic() - started < WAIT


def test_file_watcher_survives_packed_refs_being_replaced(remote: Path, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    for branch in ("one", "two"):
        git("push", "--quiet", "origin", f"HEAD:refs/heads/{branch}", cwd=clone)
    git("pack-refs", "--all", cwd=remote)  # these branches now live only in packed-refs

    events: queue.Queue[str] = queue.Queue()
    watcher: FileWatcher[str] = FileWatcher(events.put, debounce=0.05)
    watcher.watch("claims", remote)
    watcher.start()
    try:
        time.sleep(QUIET)
        for branch in ("one", "two"):  # each deletion rewrites packed-refs by a rename
            git("push", "--quiet", "origin", f":refs/heads/{branch}", cwd=clone)
            assert next_event(events) == "claims", f"deleting {branch} was not noticed"
            time.sleep(QUIET)  # the watch restarts on the new file
    finally:
        watcher.stop()


def test_file_watcher_follows_a_working_trees_git_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    git("init", "--quiet", "--initial-branch=main", str(work), cwd=tmp_path)
    git("commit", "--quiet", "--allow-empty", "-m", "initial", cwd=work)
    other = tmp_path / "other.git"
    git("init", "--quiet", "--bare", str(other), cwd=tmp_path)

    events: queue.Queue[str] = queue.Queue()
    watcher: FileWatcher[str] = FileWatcher(events.put, debounce=0.05)
    watcher.watch("work", work)
    watcher.watch("other", other)
    watcher.start()
    try:
        time.sleep(QUIET)
        git("commit", "--quiet", "--allow-empty", "-m", "local change", cwd=work)
        assert next_event(events) == "work"
        assert next_event(events, QUIET) is None  # only the repository whose refs changed

        watcher.unwatch("work")
        time.sleep(QUIET)
        git("commit", "--quiet", "--allow-empty", "-m", "unwatched", cwd=work)
        assert next_event(events, QUIET) is None
    finally:
        watcher.stop()


def test_file_watcher_refuses_a_directory_that_is_no_repository(tmp_path: Path) -> None:
    watcher: FileWatcher[str] = FileWatcher(lambda key: None)
    with pytest.raises(KlutchError, match="not a Git repository"):
        watcher.watch("nothing", tmp_path)
