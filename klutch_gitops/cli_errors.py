"""Which library errors a person's input explains, and how: the command line's last resort.

It knows ``kube.client``'s KubeError, and ``kube.client`` raises ``errors``' KlutchError, so it
lives apart from ``errors``: the error type stays a leaf that every module imports, with no cycle.
"""

from __future__ import annotations

from klutch_gitops.errors import KlutchError, short_reason


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
