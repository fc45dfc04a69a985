"""How git authenticates to a remote, without the secret ever reaching argv, URLs or config."""

from __future__ import annotations

import atexit
import functools
import re
import shlex
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

# Username sent with a token when none is given; GitHub and Gitea accept any, GitLab wants one.
DEFAULT_USERNAME = "x-access-token"

_ASKPASS = """#!/bin/sh
case "$1" in
  Username*) printf '%s\\n' "$KLUTCH_GIT_USERNAME" ;;
  *) printf '%s\\n' "$KLUTCH_GIT_PASSWORD" ;;
esac
"""
_URL_USERINFO = re.compile(r"(https?://)[^/@\s]*@")


@functools.cache
def _askpass() -> Path:
    """The helper script, written once per process into a private (0700) directory."""
    directory = Path(tempfile.mkdtemp(prefix="klutch-askpass-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    script = directory / "askpass"
    script.write_text(_ASKPASS)
    script.chmod(0o700)
    return script


@dataclass(frozen=True, repr=False)
class Credentials:
    """How to authenticate to a remote: a token (https) or a key (ssh)."""

    username: str | None = None
    password: str | None = None  # a password or token
    ssh_key_file: Path | None = None
    known_hosts_file: Path | None = None

    def __repr__(self) -> str:
        password = None if self.password is None else "***"
        return (
            f"Credentials(username={self.username!r}, password={password!r}, "
            f"ssh_key_file={self.ssh_key_file!r}, known_hosts_file={self.known_hosts_file!r})"
        )

    def environment(self) -> dict[str, str]:
        """Variables for a git child process; the secret travels only in its environment."""
        env: dict[str, str] = {}
        if self.username is not None or self.password is not None:
            env |= {
                "GIT_ASKPASS": str(_askpass()),
                "KLUTCH_GIT_USERNAME": self.username or DEFAULT_USERNAME,
                "KLUTCH_GIT_PASSWORD": self.password or "",
            }
        env["GIT_SSH_COMMAND"] = ssh_command(self.ssh_key_file, self.known_hosts_file)
        return env

    def redact(self, text: str) -> str:
        """``text`` without the secret and without credentials embedded in http(s) URLs."""
        text = _URL_USERINFO.sub(r"\1", text)
        return text.replace(self.password, "***") if self.password else text


def ssh_command(key_file: Path | None, known_hosts_file: Path | None) -> str:
    """OpenSSH for one registration: ``-F /dev/null`` so no ssh_config (a ProxyCommand, an
    agent, forwarding) applies; only the registration's key (else none, not ~/.ssh/id_*); host
    keys checked strictly against its own known_hosts (else none but the machine's global file).
    See ssh_config(5) for each option; git runs this through the shell (git(1), GIT_SSH_COMMAND).
    """
    options = {
        "BatchMode": "yes",
        "IdentitiesOnly": "yes",
        "IdentityFile": str(key_file) if key_file else "none",
        "IdentityAgent": "none",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": str(known_hosts_file) if known_hosts_file else "/dev/null",
        "UpdateHostKeys": "no",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "ClearAllForwardings": "yes",
        "PermitLocalCommand": "no",
        "ProxyCommand": "none",
        "ProxyJump": "none",
        "ControlMaster": "no",
        "ControlPath": "none",
    }
    ssh = ["ssh", "-F", "/dev/null"]
    for name, value in options.items():
        ssh += ["-o", f"{name}={value}"]
    return shlex.join(ssh)


def git_environment(transport: str, credentials: Credentials) -> dict[str, str]:
    """The variables of every git child: no prompt, only ``transport`` (git(1),
    GIT_ALLOW_PROTOCOL; also limits the redirects curl follows), no transport chosen by a
    repository's content (GIT_PROTOCOL_FROM_USER=0), and the credentials."""
    return {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_ALLOW_PROTOCOL": transport,
        "GIT_PROTOCOL_FROM_USER": "0",
        **credentials.environment(),
    }


def separate(url: str, credentials: Credentials | None) -> tuple[str, Credentials]:
    """Move ``user:token@`` out of an http(s) URL, so that it never lands in a remote's config."""
    parts = urlsplit(url)
    credentials = credentials or Credentials()
    if parts.scheme not in ("http", "https") or "@" not in parts.netloc:
        return url, credentials
    userinfo, _, host = parts.netloc.rpartition("@")
    user, _, password = (unquote(p) for p in userinfo.partition(":"))
    return urlunsplit(parts._replace(netloc=host)), replace(
        credentials,
        username=credentials.username or user or None,
        password=credentials.password or password or None,
    )
