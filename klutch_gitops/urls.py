"""Repository URLs as people and Git providers write them: one comparison key, and the checks
that keep a hostile URL, branch or path from reaching ``git``'s command line.

A webhook names a repository by its HTTPS, SSH and web URLs; a binding names it however the person
typed it. Both must land on the same key, and no credential may travel into a log line with it.

Tenants (the bind API, RepositoryBindings) get ``https://`` and ``ssh://`` (or scp-like
``user@host:path``) only; the platform team's config file may also name ``file://`` and ``http://``
repositories. Git itself would run ``ext::sh -c …``, take ``-oProxyCommand=…`` as an ssh option
or read any local repository through ``file://``, so every URL is checked here before git sees it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from klutch_gitops.errors import KlutchError

_DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22, "git+ssh": 22, "ssh+git": 22, "git": 9418}
# ``user@host:path`` (Git's scp-like syntax): a colon before any slash, and no ``://``.
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/]+)@)?(?P<host>[^:/]+):(?P<path>.*)$")
# Anchored where a scheme can begin (not inside a run of scheme characters): unanchored, a long
# run without ``://`` was tried from every position, quadratic in the text's length.
_USERINFO = re.compile(
    r"(?<![a-z0-9+.-])(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^/@\s:]*)(?P<password>:[^/@\s]*)?@",
    re.IGNORECASE,
)


TENANT_TRANSPORTS = frozenset({"https", "ssh"})
PLATFORM_TRANSPORTS = frozenset({"https", "ssh", "http", "file"})
MAX_URL_LENGTH = 2048
MAX_BRANCH_LENGTH = 255
MAX_PATH_LENGTH = 1024

# Git reads ``<transport>::<address>`` as "run git-remote-<transport>" (ext:: runs a command).
_REMOTE_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://(?P<rest>.*)$", re.DOTALL)
_HOST = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$|^\[[0-9A-Fa-f:.]+\]$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._~+%-]{0,63}$")
_UNSAFE_TEXT = re.compile(r"[\x00-\x20\x7f\\]")  # controls, whitespace, backslash
# git check-ref-format: characters no ref may hold (plus controls and space, checked above)
_REF_FORBIDDEN = re.compile(r"[~^:?*\[\x00-\x20\x7f\\]")
_TENANT_FIX = "write it as https://host/org/repo, ssh://git@host/org/repo or git@host:org/repo"


class InvalidRepoURL(KlutchError, ValueError):
    """A repository URL that names no host or path; a ValueError for callers parsing payloads."""


def url_transport(url: str, allowed: frozenset[str] = PLATFORM_TRANSPORTS) -> str:
    """The transport git would use for ``url`` (``https``, ``ssh``, ``http``, ``file``), once the
    URL passed every check; raises InvalidRepoURL naming the problem otherwise.

    Refused: other transports (``ext::``, ``git://``, ``fd::``…) and those not in ``allowed``;
    a password in the URL; a user, host or path starting with ``-`` (ssh would take it as an
    option); control characters, whitespace and backslashes; more than 2048 characters.
    """
    fix = _TENANT_FIX if allowed <= TENANT_TRANSPORTS else _invalid(url).fix
    if not url or len(url) > MAX_URL_LENGTH:
        raise InvalidRepoURL(
            f"the repository URL must have 1 to {MAX_URL_LENGTH} characters, got {len(url)}", fix
        )
    if _REMOTE_HELPER.match(url):
        raise InvalidRepoURL(f"{_shown(url)} names a git remote helper (transport::address)", fix)
    if _UNSAFE_TEXT.search(url):
        raise InvalidRepoURL(
            f"{_shown(url)} holds whitespace, a control character or a backslash", fix
        )
    scheme_match = _SCHEME.match(url)
    local = scheme_match is None and url.startswith("/")  # git's local path: the file transport
    transport = scheme_match["scheme"].lower() if scheme_match else "file" if local else "ssh"
    if transport not in allowed:
        raise InvalidRepoURL(
            f"{_shown(url)} uses {transport}, which is not allowed here "
            f"(allowed: {', '.join(sorted(allowed))})",
            fix,
        )
    if local:
        user, password, host, path = None, None, "", url
    elif scheme_match is None:
        user, password, host, path = _scp_parts(url, fix)
    else:
        user, password, host, path = _url_parts(transport, scheme_match["rest"], url, fix)
    if password is not None:
        raise InvalidRepoURL(
            f"{_shown(url)} carries a password or token",
            "leave credentials out of the URL; give them as the registration's credentials",
        )
    if user is not None and not _USER.match(user):
        raise InvalidRepoURL(f"the user name in {_shown(url)} is not a plain user name", fix)
    if transport != "file" and (not _HOST.match(host) or ".." in host):
        raise InvalidRepoURL(f"the host in {_shown(url)} is not a host name or address", fix)
    if path.lstrip("/").startswith("-") or not path.strip("/"):
        raise InvalidRepoURL(f"the path in {_shown(url)} is empty or starts with '-'", fix)
    return transport


def check_branch(branch: str) -> str | None:
    """Why ``branch`` is no branch name git accepts (git check-ref-format of
    ``refs/heads/<branch>``, and no leading ``-``), or None when it is one."""
    if not branch or len(branch) > MAX_BRANCH_LENGTH:
        return f"must have 1 to {MAX_BRANCH_LENGTH} characters"
    if branch.startswith("-"):
        return "must not start with '-'"
    if branch == "HEAD" or branch == "@":
        return f"{branch!r} is not a branch name"
    if _REF_FORBIDDEN.search(branch):
        return "must not hold whitespace, control characters or any of ~ ^ : ? * [ \\"
    if ".." in branch or "@{" in branch or "//" in branch:
        return "must not hold '..', '@{' or '//'"
    if branch.startswith("/") or branch.endswith(("/", ".")):
        return "must not start with '/' nor end with '/' or '.'"
    if any(part.startswith(".") or part.endswith(".lock") for part in branch.split("/")):
        return "no part between slashes may start with '.' or end with '.lock'"
    return None


def check_repo_path(path: str) -> str | None:
    """Why ``path`` is no folder inside a repository (relative, no ``..`` or ``.git`` part, no
    leading ``-``, no control characters or backslashes), or None when it is one."""
    if not path or len(path) > MAX_PATH_LENGTH:
        return f"must have 1 to {MAX_PATH_LENGTH} characters"
    if path.startswith(("/", "-")):
        return "must be relative and must not start with '-'"
    if re.search(r"[\x00-\x1f\x7f\\]", path):
        return "must not hold control characters or backslashes"
    if {"..", ".git"} & set(path.split("/")):
        return "must not contain '..' or '.git'"
    return None


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


def _url_parts(
    transport: str, rest: str, url: str, fix: str
) -> tuple[str | None, str | None, str, str]:
    """user, password, host and path of ``scheme://rest`` (the host empty for file://)."""
    authority, slash, path = rest.partition("/")
    path = slash + path
    if transport == "file":
        if authority not in ("", "localhost"):
            raise InvalidRepoURL(f"{_shown(url)} names a host; write file:///path", fix)
        return None, None, "", path
    userinfo, at, hostport = authority.rpartition("@")
    user, colon, password = userinfo.partition(":")
    host, port = hostport, ""
    if not hostport.endswith("]") and ":" in hostport:
        host, _, port = hostport.rpartition(":")
    if port and not (port.isdigit() and 0 < int(port) < 65536):
        raise InvalidRepoURL(f"the port in {_shown(url)} is not a number from 1 to 65535", fix)
    return (user if at else None), (password if colon else None), host, path


def _scp_parts(url: str, fix: str) -> tuple[str | None, str | None, str, str]:
    """user, password, host and path of git's scp-like ``[user@]host:path``."""
    match = _SCP_LIKE.match(url)
    if match is None or match["path"].startswith("//"):
        raise InvalidRepoURL(f"{_shown(url)} is not a repository URL", fix)
    user = match["user"]
    password = None
    if user is not None and ":" in user:
        user, _, password = user.partition(":")
    return user, password, match["host"], match["path"]


def _shown(url: str) -> str:
    """``url`` for a message: redacted, cut short, control characters escaped."""
    text = redact(url[:400])
    return repr(text if len(text) <= 200 else text[:200] + "…")


def _invalid(url: str) -> InvalidRepoURL:
    return InvalidRepoURL(
        f"{_shown(url)} is not a repository URL",
        "write it as https://host/org/repo, ssh://git@host/org/repo, git@host:org/repo "
        "or file:///path/to/repo",
    )
