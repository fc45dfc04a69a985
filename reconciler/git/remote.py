"""Asking a remote without a clone."""

from __future__ import annotations

from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import url_transport
from reconciler.git.credentials import Credentials, separate
from reconciler.git.runner import checked_branch, fix_for, run_git


def ls_remote(
    url: str, branch: str, credentials: Credentials | None = None, timeout: float = 30
) -> str | None:
    """The commit a remote branch points at, or None when it does not exist: a cheap poll."""
    url, credentials = separate(url, credentials)
    transport = url_transport(url)
    ref = f"refs/heads/{checked_branch(branch)}"
    status, out, err = run_git(
        ["ls-remote", "--", url, ref],
        cwd=None,
        credentials=credentials,
        transport=transport,
        timeout=timeout,
    )
    if status != 0:
        raise KlutchError(
            f"cannot list {url}: {err.strip()}",
            fix=fix_for(err, "check the repository URL, the network and the credentials"),
        )
    for line in out.splitlines():
        sha, _, name = line.partition("\t")
        if name == ref:
            return sha
    return None
