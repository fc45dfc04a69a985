"""Forge adapters: the plan comment and the commit status of a pull request, on GitHub, GitLab
and Gitea.

Each adapter builds plain requests (method, URL, headers, JSON) — pure, so the unit tests hold
them against the forges' documented shapes — and a thin httpx layer sends them. A comment of ours
starts with a hidden marker naming the registration; it is found by that marker and edited in
place, so a pull request carries one plan per registration however often it is planned.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

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
    """REST API v3: ``api_url`` is the payload's ``repository.url``
    (``https://api.github.com/repos/OWNER/REPO``). Pull requests are issues for comments."""

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
    """API v1, GitHub's shapes: ``api_url`` is the payload's ``repository.url``
    (``https://HOST/api/v1/repos/OWNER/REPO``); tokens go as ``Authorization: token``."""

    name = "Gitea"

    def headers(self) -> dict[str, str]:
        return {"Accept": "application/json", "Authorization": f"token {self.token}"}

    def list_comments(self, number: int) -> Request:
        url = f"{self.api_url}/issues/{number}/comments"
        return Request("GET", url, self.headers())  # all of them: Gitea does not page these


class GitLab(Forge):
    """REST API v4: ``api_url`` is ``https://HOST/api/v4/projects/ID``. Merge request comments are
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
