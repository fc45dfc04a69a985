"""The one error type that a person sees: what went wrong, and what to do about it."""

from __future__ import annotations


class KlutchError(Exception):
    """An error with a fix. The CLI prints both and exits non-zero, without a traceback."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.fix}" if self.fix else self.message


def short_reason(reason: object) -> str:
    """``Connection refused`` rather than ``<HTTPSConnection object at 0x…>: Failed … refused``."""
    text = str(reason or "no answer")
    return text.rsplit("] ", 1)[-1] if "[Errno" in text else text.rsplit(">: ", 1)[-1]


def yaml_problem(error: Exception) -> str:
    """PyYAML's complaint on one line: ``line 2, column 1: expected the node content, …``."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem
