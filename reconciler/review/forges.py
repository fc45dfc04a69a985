"""Forge adapters: the plan comment and the commit status of a pull request, on GitHub, GitLab
and Gitea.

Each adapter builds plain requests (method, URL, headers, JSON) — pure, so the unit tests hold
them against the forges' documented shapes — and a thin httpx layer sends them. A comment of ours
starts with a hidden marker naming the registration; it is found by that marker and edited in
place, so a pull request carries one plan per registration however often it is planned.

Where a repository's API is comes from its registered URL and the provider alone
(:func:`repository_api`), never from a webhook payload: a payload signed with one registration's
secret cannot send that registration's token, or anyone else's, to another server.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar
from urllib.parse import quote, urlsplit

import httpx

from klutch_gitops.errors import KlutchError

TIMEOUT = 30.0  # seconds per request
MAX_PAGES = 50  # of comments to look through for ours
MAX_DESCRIPTION = 140  # GitHub refuses longer status descriptions


class State(StrEnum):
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"  # the plan has failures
    ERROR = "error"  # no plan could be made


@dataclass(frozen=True)
class Request:
    method: str
    url: str
    headers: dict[str, str]
    json: dict[str, Any] | None = None
    params: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Comment:
    id: int
    body: str
    url: str | None  # where a person reads it, when the forge says


class ForgeError(KlutchError):
    """The forge refused a request or could not be reached."""


class Forge(ABC):
    """One forge's REST API for one repository (``api_url``), used with one token."""

    name: ClassVar[str]

    def __init__(
        self, api_url: str, token: str, transport: httpx.BaseTransport | None = None
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.token = token
        self._transport = transport

    # -- requests (pure) ----------------------------------------------------------------------

    @abstractmethod
    def headers(self) -> dict[str, str]: ...

    @abstractmethod
    def list_comments(self, number: int) -> Request: ...

    @abstractmethod
    def create_comment(self, number: int, body: str) -> Request: ...

    @abstractmethod
    def update_comment(self, number: int, comment_id: int, body: str) -> Request: ...

    @abstractmethod
    def set_status(
        self, sha: str, state: State, context: str, description: str, target_url: str | None
    ) -> Request: ...

    def comment(self, data: dict[str, Any]) -> Comment:
        return Comment(int(data["id"]), str(data.get("body") or ""), data.get("html_url"))

    def accepts(self, response: httpx.Response) -> bool:
        """Whether a response means the request did what it asked."""
        return response.is_success

    # -- I/O ----------------------------------------------------------------------------------

    def upsert_comment(self, number: int, marker: str, body: str) -> Comment:
        """Edit the comment that starts with ``marker``, or make it; ``body`` must start with it."""
        ours = next((c for c in self.comments(number) if c.body.startswith(marker)), None)
        request = (
            self.create_comment(number, body)
            if ours is None
            else self.update_comment(number, ours.id, body)
        )
        return self.comment(self.send(request).json())

    def comments(self, number: int) -> Iterator[Comment]:
        """Every comment of the pull request, oldest first, page by page (``Link: rel=next``)."""
        request: Request | None = self.list_comments(number)
        for _ in range(MAX_PAGES):
            if request is None:
                return
            response = self.send(request)
            items = response.json()
            if not isinstance(items, list):
                raise ForgeError(
                    f"{self.name} answered the comment list of #{number} with "
                    f"{type(items).__name__}, not a list",
                    "check that the registration's forgeToken belongs to this forge",
                )
            yield from (self.comment(item) for item in items if self._is_comment(item))
            following = response.links.get("next", {}).get("url")
            if following and not _same_origin(following, self.api_url):
                raise ForgeError(
                    f"{self.name} pointed the next page of comments of #{number} at another "
                    f"server ({following[:200]}); the token is sent to {self.api_url} only",
                    "check that the registered repository URL names the forge itself",
                )
            request = Request("GET", following, self.headers()) if following else None

    def post_status(
        self, sha: str, state: State, context: str, description: str, target_url: str | None
    ) -> None:
        self.send(self.set_status(sha, state, context, description[:MAX_DESCRIPTION], target_url))

    def send(self, request: Request) -> httpx.Response:
        try:
            with httpx.Client(timeout=TIMEOUT, transport=self._transport) as client:
                response = client.request(
                    request.method,
                    request.url,
                    headers=request.headers,
                    json=request.json,
                    params=request.params or None,  # {} would drop the URL's own query
                )
        except httpx.HTTPError as error:
            raise ForgeError(
                f"{self.name} API {request.method} {request.url}: {type(error).__name__}: {error}",
                "check that the forge is reachable from the reconciler",
            ) from None
        if not self.accepts(response):
            raise ForgeError(
                f"{self.name} API {request.method} {request.url}: {response.status_code} "
                f"{response.text[:500]}",
                "check that the registration's forgeToken may comment on pull requests and "
                "set commit statuses in this repository",
            )
        return response

    def _is_comment(self, item: Any) -> bool:
        return isinstance(item, dict) and "id" in item


class GitHub(Forge):
    """REST API v3: ``api_url`` is ``https://api.github.com/repos/OWNER/REPO`` (GitHub Enterprise
    Server: ``https://HOST/api/v3/repos/OWNER/REPO``). Pull requests are issues for comments."""

    name = "GitHub"

    def headers(self) -> dict[str, str]:
        return {
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {self.token}",
            "X-GitHub-Api-Version": "2022-11-28",
        }

    def list_comments(self, number: int) -> Request:
        url = f"{self.api_url}/issues/{number}/comments"
        return Request("GET", url, self.headers(), params={"per_page": "100"})

    def create_comment(self, number: int, body: str) -> Request:
        url = f"{self.api_url}/issues/{number}/comments"
        return Request("POST", url, self.headers(), {"body": body})

    def update_comment(self, number: int, comment_id: int, body: str) -> Request:
        url = f"{self.api_url}/issues/comments/{comment_id}"
        return Request("PATCH", url, self.headers(), {"body": body})

    def set_status(
        self, sha: str, state: State, context: str, description: str, target_url: str | None
    ) -> Request:
        payload = {"state": state.value, "context": context, "description": description}
        if target_url:
            payload["target_url"] = target_url
        return Request("POST", f"{self.api_url}/statuses/{sha}", self.headers(), payload)


class Gitea(GitHub):
    """API v1, GitHub's shapes: ``api_url`` is ``https://HOST/api/v1/repos/OWNER/REPO``; tokens
    go as ``Authorization: token``."""

    name = "Gitea"

    def headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "Authorization": f"token {self.token}"}

    def list_comments(self, number: int) -> Request:
        url = f"{self.api_url}/issues/{number}/comments"
        return Request("GET", url, self.headers())  # all of them: Gitea does not page these


class GitLab(Forge):
    """REST API v4: ``api_url`` is ``https://HOST/api/v4/projects/GROUP%2FPROJECT`` (the URL-encoded
    path stands for the id everywhere we call). Merge request comments are
    notes (system notes excluded); a commit status has ``name`` and GitLab's states."""

    name = "GitLab"
    STATES: ClassVar[dict[State, str]] = {
        State.PENDING: "pending",
        State.SUCCESS: "success",
        State.FAILURE: "failed",
        State.ERROR: "failed",
    }

    def headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "PRIVATE-TOKEN": self.token}

    def list_comments(self, number: int) -> Request:
        url = f"{self.api_url}/merge_requests/{number}/notes"
        params = {"per_page": "100", "sort": "asc", "order_by": "created_at"}
        return Request("GET", url, self.headers(), params=params)

    def create_comment(self, number: int, body: str) -> Request:
        url = f"{self.api_url}/merge_requests/{number}/notes"
        return Request("POST", url, self.headers(), {"body": body})

    def update_comment(self, number: int, comment_id: int, body: str) -> Request:
        url = f"{self.api_url}/merge_requests/{number}/notes/{comment_id}"
        return Request("PUT", url, self.headers(), {"body": body})

    def set_status(
        self, sha: str, state: State, context: str, description: str, target_url: str | None
    ) -> Request:
        payload = {"state": self.STATES[state], "name": context, "description": description}
        if target_url:
            payload["target_url"] = target_url
        return Request("POST", f"{self.api_url}/statuses/{sha}", self.headers(), payload)

    def comment(self, data: dict[str, Any]) -> Comment:
        return Comment(int(data["id"]), str(data.get("body") or ""), None)

    def accepts(self, response: httpx.Response) -> bool:
        # Posting the state a commit status already has is refused ("Cannot transition status
        # via :run from :running"); it is where we want it, so that is no failure.
        return response.is_success or (
            response.status_code == 400 and "Cannot transition status" in response.text
        )

    def _is_comment(self, item: Any) -> bool:
        return super()._is_comment(item) and not item.get("system")


FORGES: dict[str, type[Forge]] = {"github": GitHub, "gitlab": GitLab, "gitea": Gitea}


class NoForgeAPI(KlutchError):
    """A registered repository URL from which no forge API can be derived."""


# The documented API roots: GitHub.com "https://api.github.com", GitHub Enterprise Server
# "http(s)://HOSTNAME/api/v3" (docs.github.com/en/enterprise-server@3.10/rest/enterprise-admin,
# "Endpoint URLs"), Gitea "/api/v1" under its ROOT_URL (docs.gitea.com/development/api-usage),
# GitLab "/api/v4" with the URL-encoded project path as its id (docs.gitlab.com/ee/api/rest/,
# "Namespaced paths").
GITHUB_COM = frozenset({"github.com", "www.github.com"})
_SCP_LIKE = re.compile(r"^(?:[^@/]+@)?(?P<host>[^:/]+):(?P<path>.*)$")  # git@host:org/repo
_SEGMENT = re.compile(r"^[A-Za-z0-9_~+-][A-Za-z0-9._~+-]*$")  # owners, groups, repositories


def repository_api(provider: str, repository_url: str, project_path: str | None = None) -> str:
    """The API URL of the repository registered as ``repository_url`` on ``provider``'s forge.

    Scheme, host, port and any path prefix come from the registered URL: ``https://`` and
    ``http://`` URLs keep theirs, SSH URLs (``ssh://``, ``git@host:path``) give ``https://`` on
    the same host (their port is SSH's). ``project_path`` (GitLab's ``path_with_namespace``) only
    chooses where, within the registered path, the project starts — GitLab may live under a
    relative URL root and groups nest; it is ignored unless the registered path ends with it.
    Raises NoForgeAPI for ``file://`` and other URLs that name no forge.
    """
    origin, segments = _web_location(repository_url)
    if provider == "gitlab":
        project = segments
        wanted = [part for part in (project_path or "").split("/") if part]
        if wanted and segments[-len(wanted) :] == wanted:
            project = wanted
        prefix = segments[: len(segments) - len(project)]
        encoded = quote("/".join(project), safe="")
        return f"{origin}{_joined(prefix)}/api/v4/projects/{encoded}"
    if len(segments) < 2:
        raise NoForgeAPI(
            f"{repository_url!r} names no OWNER/REPO path", "register the repository's own URL"
        )
    prefix, (owner, repo) = segments[:-2], segments[-2:]
    if provider == "github":
        host = urlsplit(origin).hostname or ""
        if host in GITHUB_COM and not prefix:
            return f"https://api.github.com/repos/{owner}/{repo}"
        return f"{origin}{_joined(prefix)}/api/v3/repos/{owner}/{repo}"
    if provider == "gitea":
        return f"{origin}{_joined(prefix)}/api/v1/repos/{owner}/{repo}"
    raise NoForgeAPI(f"unknown forge {provider!r}", "use github, gitlab or gitea")


def _web_location(url: str) -> tuple[str, list[str]]:
    """``scheme://host[:port]`` and the path segments (without ``.git``) of a repository URL."""
    text = url.strip()
    fix = "register the repository's https:// or ssh:// URL on its forge to plan pull requests"
    if "://" in text:
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        try:
            port = parts.port
        except ValueError:
            raise NoForgeAPI(f"{url!r} has an invalid port", fix) from None
        host = parts.hostname
        if scheme not in ("https", "http", "ssh", "git+ssh", "ssh+git") or not host:
            raise NoForgeAPI(f"{url!r} is not on a forge", fix)
        netloc = f"[{host}]" if ":" in host else host
        if scheme in ("https", "http"):
            origin = f"{scheme}://{netloc}" + (f":{port}" if port is not None else "")
        else:
            origin = f"https://{netloc}"  # the SSH port says nothing about the web's
        path = parts.path
    else:
        scp = _SCP_LIKE.match(text)
        if scp is None or text.startswith("/"):
            raise NoForgeAPI(f"{url!r} is not on a forge", fix)
        origin, path = f"https://{scp['host'].lower()}", scp["path"]
    segments = [part for part in path.rstrip("/").removesuffix(".git").split("/") if part]
    if not segments or not all(_SEGMENT.match(part) for part in segments):
        raise NoForgeAPI(f"{url!r} names no repository path of plain names", fix)
    return origin, segments


def _joined(prefix: list[str]) -> str:
    return "".join(f"/{part}" for part in prefix)


def _same_origin(url: str, base: str) -> bool:
    one, other = urlsplit(url), urlsplit(base)
    return (one.scheme, one.netloc) == (other.scheme, other.netloc)
