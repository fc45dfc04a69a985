"""Options every command line of klutch-gitops takes alike."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class LogLevel(StrEnum):
    """The levels of Python's logging a person may choose; click lists them on a wrong one."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


LogLevelOption = Annotated[
    LogLevel, typer.Option("--log-level", case_sensitive=False, help="How much to log")
]
