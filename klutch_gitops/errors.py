"""The one error type that a person sees: what went wrong, and what to do about it."""


class KlutchError(Exception):
    """An error with a fix. The CLI prints both and exits non-zero, without a traceback."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}\n  fix: {self.fix}" if self.fix else self.message
