"""Failpoints: parsed strictly, inert unless armed, and a paused one holds its thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reconciler.failpoints import DIR_ENV, ENV, Failpoints, parse


def test_parse_reads_name_action_terms() -> None:
    assert parse("") == {}
    assert parse(" ; ") == {}
    assert parse("git.before-push=pause") == {"git.before-push": "pause"}
    assert parse(" git.before-push = pause ;controlplane.after-apply=pause;") == {
        "git.before-push": "pause",
        "controlplane.after-apply": "pause",
    }


@pytest.mark.parametrize("spec", ["git.before-push", "=pause", "x=panic", "x=pause;y"])
def test_parse_refuses_what_it_cannot_do(spec: str) -> None:
    with pytest.raises(ValueError, match=f"{ENV}: .* is not name=action"):
        parse(spec)


def test_an_armed_pause_needs_a_marker_directory() -> None:
    with pytest.raises(ValueError, match=DIR_ENV):
        Failpoints.from_env({ENV: "x=pause"})
    assert Failpoints.from_env({}).armed == {}


def test_unarmed_failpoints_return_at_once(tmp_path: Path) -> None:
    points = Failpoints({"armed": "pause"}, tmp_path)
    points.hit("other")
    assert list(tmp_path.iterdir()) == []


def test_pause_writes_its_marker_and_blocks(tmp_path: Path) -> None:
    points = Failpoints({"armed": "pause"}, tmp_path / "markers")
    thread = threading.Thread(target=points.hit, args=("armed",), daemon=True)
    thread.start()
    marker = tmp_path / "markers" / "armed"
    deadline = time.monotonic() + 10
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marker.read_text() == str(os.getpid())
    thread.join(0.2)
    assert thread.is_alive()  # paused for good; the daemon thread ends with the test process


def test_the_environment_is_read_at_import(tmp_path: Path) -> None:
    """A process armed through its environment pauses at the named point until killed."""
    code = "from reconciler.failpoints import failpoint; failpoint('a'); failpoint('b')"
    env = {**os.environ, ENV: "b=pause", DIR_ENV: str(tmp_path)}
    child = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "b").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "b").read_text() == str(child.pid)
        assert not (tmp_path / "a").exists()
        time.sleep(0.2)
        assert child.poll() is None
    finally:
        child.kill()
        child.wait()
