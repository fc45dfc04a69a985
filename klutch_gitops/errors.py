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


def explain(error: BaseException) -> KlutchError | None:
    """The KlutchError for a library error a person's input can cause, or None for a bug.

    The CLI's last resort: commands check what they are given first (``preflight``), so these
    messages are generic; a traceback stays for what no input explains.
    """
    import urllib3
    from kubernetes.config.config_exception import ConfigException

    from klutch_gitops.kube.client import KubeError

    if isinstance(error, urllib3.exceptions.MaxRetryError):
        return KlutchError(
            f"cannot reach {server_url(error)}: {short_reason(error.reason)}",
            "check that the cluster is running and the server URL in the kubeconfig",
        )
    if isinstance(error, KubeError):
        return KlutchError(
            f"the API server refused a request: {error}"[:500],
            "check the kubeconfig's credentials and their permissions",
        )
    if isinstance(error, ConfigException):
        return KlutchError(f"kubeconfig: {error}"[:500], "fix the kubeconfig file")
    if isinstance(error, OSError) and error.filename is not None:
        return KlutchError(
            f"cannot use {error.filename}: {error.strerror}",
            "pass a path that exists and is readable",
        )
    return None


def server_url(error: object) -> str:
    """``scheme://host:port`` of the connection pool a urllib3 error came from."""
    pool = getattr(error, "pool", None)
    if pool is None:
        return "the server"
    return f"{pool.scheme}://{pool.host}:{pool.port}"


def short_reason(reason: object) -> str:
    """``Connection refused`` rather than ``<HTTPSConnection object at 0x…>: Failed … refused``."""
    text = str(reason or "no answer")
    return text.rsplit("] ", 1)[-1] if "[Errno" in text else text.rsplit(">: ", 1)[-1]


def yaml_problem(error: Exception) -> str:
    """PyYAML's complaint on one line: ``line 2, column 1: expected the node content, …``."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}" if mark else problem
