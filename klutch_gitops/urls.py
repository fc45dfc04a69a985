"""Repository URLs as people and Git providers write them, reduced to one comparison key.

A webhook names a repository by its HTTPS, SSH and web URLs; a binding names it however the person
typed it. Both must land on the same key, and no credential may travel into a log line with it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from klutch_gitops.errors import KlutchError

_DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22, "git+ssh": 22, "ssh+git": 22, "git": 9418}
# ``user@host:path`` (Git's scp-like syntax): a colon before any slash, and no ``://``.
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/]+)@)?(?P<host>[^:/]+):(?P<path>.*)$")
_USERINFO = re.compile(
    r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/@\s:]*)(?P<password>:[^/@\s]*)?@", re.IGNORECASE
)


class InvalidRepoURL(KlutchError, ValueError):
    """A repository URL that names no host or path; a ValueError for callers parsing payloads."""


def normalize_repo_url(url: str) -> str:
    """The key under which two spellings of one repository compare equal.

    Transport, user info, default ports, a trailing ``/`` and ``.git`` do not matter:
    ``https://github.com/org/repo``, ``git@github.com:org/repo.git`` and
    ``ssh://git@github.com/org/repo`` all give ``github.com/org/repo``. Local repositories keep
    their scheme (``file:///srv/x.git`` gives ``file:///srv/x``) so they never match a host.
    """
    text = url.strip()
    if "://" not in text:
        if text.startswith("/"):
            return "file://" + _strip_path(text)
        scp = _SCP_LIKE.match(text)
        if scp is None:
            raise _invalid(url)
        return _key(scp["host"], None, "/" + scp["path"].lstrip("/"), url)
    parts = urlsplit(text)
    scheme = parts.scheme.lower()
    if scheme == "file":
        return "file://" + _strip_path(parts.path)
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise _invalid(url)
    try:
        port = parts.port
    except ValueError as error:
        raise _invalid(url) from error
    return _key(parts.hostname, None if port == _DEFAULT_PORTS[scheme] else port, parts.path, url)


def redact(url: str) -> str:
    """``url`` (or any text holding URLs) without passwords or tokens, for logs and errors.

    A password is replaced by ``***``; so is an HTTP(S) user name standing alone, because hosts
    take tokens there (``https://<token>@github.com``). SSH user names such as ``git`` stay.
    """

    def mask(match: re.Match[str]) -> str:
        scheme, user = match["scheme"], match["user"]
        if match["password"] is not None:
            return f"{scheme}{user}:***@"
        return f"{scheme}***@" if scheme.lower().startswith("http") else match.group(0)

    return _USERINFO.sub(mask, url)


def _key(host: str, port: int | None, path: str, url: str) -> str:
    path = _strip_path(path)
    if not path:
        raise _invalid(url)
    host = f"[{host.lower()}]" if ":" in host else host.lower()
    netloc = host if port is None else f"{host}:{port}"
    return netloc + path


def _strip_path(path: str) -> str:
    path = path.rstrip("/")
    path = path.removesuffix(".git")
    return path.rstrip("/")


def _invalid(url: str) -> InvalidRepoURL:
    return InvalidRepoURL(
        f"{redact(url)!r} is not a repository URL",
        "write it as https://host/org/repo, ssh://git@host/org/repo, git@host:org/repo "
        "or file:///path/to/repo",
    )
