"""How a run is split over pytest-xdist workers (pyproject's addopts: ``-n 3 --dist loadfile``).

Every worker is a pytest session of its own, so session fixtures (the local stack, the Git
server) are per worker already; what they must not share is a port or a fixed path. Ports: each
test process claims a block of loopback ports that no other process on the machine holds
(``claim_port_block``), and ``free_port`` hands out ports of that block only. Work: a test module
is one unit, so its module fixtures are built once; the modules that share something a worker
starts once per run are one unit together (``work_unit``), so it is started on one worker only.
(xdist's own ``xdist_group`` mark would say the latter, but it renames node ids in a way pytest 9
ignores.)
"""

from __future__ import annotations

import fcntl
import os
from functools import cache
from pathlib import Path
from typing import IO

import pytest
from xdist.remote import Producer  # type: ignore[import-untyped]  # xdist ships no types
from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

from klutch_gitops.dev.localstack.processes import PORT_RANGE_VARIABLE, port_dir

# Below Linux's ephemeral range (32768-60999), so no outgoing connection takes one of them either.
FIRST_PORT, BLOCK_SIZE, BLOCKS = 16000, 2000, 8

# Folders whose conftest starts something per run: the chaos tier's own stack, Flux and Argo CD.
SHARED_FOLDERS = ("chaos", "peers")
# Helpers whose callers may start the other Crossplane line's stack (integration/catalogstack).
OTHER_LINE_STARTERS = ("other_line_stack", "stack_for_line")

_claimed: list[IO[str]] = []  # the open lock file of this process's block, held until it exits


def work_unit(nodeid: str, source: str) -> str:
    """The unit of work of the test ``nodeid`` in a module whose text is ``source``: the module,
    or the group its module shares a per-run resource with."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[1] in SHARED_FOLDERS:
        return parts[1]
    if any(name in source for name in OTHER_LINE_STARTERS):
        return "crossplane-other-line"
    return path


class WorkScheduling(LoadFileScheduling):  # type: ignore[misc]
    """``--dist loadfile`` with the units of ``work_unit``."""

    def __init__(self, config: pytest.Config, log: Producer | None = None) -> None:
        super().__init__(config, log)
        self.root = config.rootpath

    def _split_scope(self, nodeid: str) -> str:
        return work_unit(nodeid, _source(self.root / nodeid.split("::", 1)[0]))


@cache
def _source(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # not a file: a doctest's or a plugin's item
        return ""


def port_blocks() -> list[str]:
    """The blocks a test process may claim, as ``$KLUTCH_PORT_RANGE`` values."""
    return [
        f"{first}-{first + BLOCK_SIZE - 1}"
        for first in range(FIRST_PORT, FIRST_PORT + BLOCKS * BLOCK_SIZE, BLOCK_SIZE)
    ]


def claim_port_block() -> str | None:
    """Take the first block no other live process holds (a lock released by the kernel when
    this process exits, however it exits) and point ``free_port`` at it; None when all are
    taken, and ``free_port`` then asks the kernel as before."""
    try:
        directory = port_dir()
    except OSError:
        return None
    for block in port_blocks():
        handle = (directory / f"{block}.owner").open("a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _claimed.append(handle)
        os.environ[PORT_RANGE_VARIABLE] = block
        return block
    return None
