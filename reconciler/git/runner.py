"""The one way this project runs git: no prompt, no credential helper, one transport, a deadline."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import git

from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import check_branch
from reconciler.git.credentials import Credentials, git_environment

# The deadline of one git command, unless a registration sets its own.
DEFAULT_TIMEOUT = 120.0


def run_git(
    args: list[str],
    *,
    cwd: Path | None,
    credentials: Credentials,
    transport: str,
    timeout: float,
    env: Mapping[str, str] | None = None,
    stdin: BinaryIO | None = None,
) -> tuple[int, str, str]:
    """Run git once: no prompt, no credential helper that could store our secret, one
    transport, a deadline."""
    command = ["git", "-c", "credential.helper=", *args]
    environment = {**git_environment(transport, credentials), **(env or {})}
    status, out, err = git.Git(cwd).execute(
        command,
        env=environment,
        kill_after_timeout=timeout,
        istream=stdin,
        with_extended_output=True,
        with_exceptions=False,
    )
    return status, out, credentials.redact(err)


def checked_branch(branch: str) -> str:
    """``branch`` if git check-ref-format accepts it; else a KlutchError that says so."""
    problem = check_branch(branch)
    if problem:
        raise KlutchError(
            f"the branch {branch!r} {problem}", "name a branch that git check-ref-format accepts"
        )
    return branch


def fix_for(err: str, default: str) -> str:
    """The fix for git's error ``err``: ssh's refusal of an unknown host key has its own."""
    if "Host key verification failed" in err:
        return (
            "ssh knows the host only from the registration's known_hosts: add the host's key "
            "(the known_hosts key of the credentials Secret, --known-hosts of klutch-bind, or "
            "credentials.knownHostsFile in the config), checked against the host's published "
            "fingerprints"
        )
    return default


class GitFailed(KlutchError):
    """A git command that exited non-zero; ``status`` and ``out`` for callers that read them
    (merge-tree's conflicts), the message is git's own (redacted) error."""

    def __init__(self, command: str, status: int, out: str, err: str) -> None:
        super().__init__(err.strip() or f"git {command} exited with {status}", "see git's message")
        self.command, self.status, self.out = command, status, out
