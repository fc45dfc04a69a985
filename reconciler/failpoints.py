"""Failpoints: named moments in the code where a test can stop the process, like etcd's gofail.

A chaos test must SIGKILL the reconciler at an exact moment (a status commit made but not pushed,
some claims applied to the Control Plane but not all), which no timing can hit reliably. Each
failpoint is one ``failpoint(name)`` call; it does nothing unless the environment arms it:

    KLUTCH_GITOPS_FAILPOINTS="git.before-push=pause;controlplane.after-apply=pause"
    KLUTCH_GITOPS_FAILPOINT_DIR=/tmp/markers

The variables are read once, at import, so an unarmed failpoint costs one dict lookup. Actions:

- ``pause``: write the marker file ``$KLUTCH_GITOPS_FAILPOINT_DIR/<name>`` (it holds the pid), then
  block the calling thread forever; the test waits for the marker and kills the process.

Failpoints:

- ``git.before-push``: a status commit exists in the reconciler's clone and is not pushed yet
  (``Checkout.push``, whose only caller is the status write-back).
- ``git.after-push``: the status commit is on the remote and nothing in the process has
  recorded it yet.
- ``controlplane.after-apply``: a claim was just applied to the Control Plane, in the middle of a
  pass; the pass applies up to ``APPLY_CONCURRENCY`` claims at once, and each of them pauses here.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path

ENV = "KLUTCH_GITOPS_FAILPOINTS"
DIR_ENV = "KLUTCH_GITOPS_FAILPOINT_DIR"
ACTIONS = ("pause",)


def parse(spec: str) -> dict[str, str]:
    """``name=action`` terms separated by ``;`` into {name: action}; ValueError names a bad
    term, so a typo fails the process at start instead of silently arming nothing."""
    armed: dict[str, str] = {}
    for term in (t.strip() for t in spec.split(";")):
        if not term:
            continue
        name, sep, action = (part.strip() for part in term.partition("="))
        if not name or not sep or action not in ACTIONS:
            raise ValueError(
                f"{ENV}: {term!r} is not name=action with an action of {', '.join(ACTIONS)}"
            )
        armed[name] = action
    return armed


class Failpoints:
    """The armed failpoints of a process, and where their markers go."""

    def __init__(self, armed: Mapping[str, str], directory: Path | None) -> None:
        if armed and directory is None:
            raise ValueError(f"{ENV} is set but {DIR_ENV} is not: pause writes a marker there")
        self.armed = dict(armed)
        self.directory = directory

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Failpoints:
        directory = env.get(DIR_ENV)
        return cls(parse(env.get(ENV, "")), Path(directory) if directory else None)

    def hit(self, name: str) -> None:
        if self.armed.get(name) != "pause":
            return
        assert self.directory is not None  # checked in __init__
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / name).write_text(str(os.getpid()))
        threading.Event().wait()  # forever: the test kills the process here


_ACTIVE = Failpoints.from_env(os.environ)


def failpoint(name: str) -> None:
    """Act as the environment armed ``name``: by default, nothing."""
    _ACTIVE.hit(name)
