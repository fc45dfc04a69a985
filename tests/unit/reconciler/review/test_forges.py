"""The forge adapters against the documented request and response shapes of GitHub's REST API,
GitLab's REST API v4 and Gitea's API v1; httpx.MockTransport plays the forge."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import pytest

from reconciler.review.forges import (
    FORGES,
    MAX_DESCRIPTION,
    ForgeError,
    Gitea,
    GitHub,
    GitLab,
    NoForgeAPI,
    State,
    repository_api,
)

TOKEN = "ghp_s3cr3t-token"
SHA = "c" * 40
MARKER = "<!-- klutch-gitops plan: team-a -->"
GITHUB_API = "https://api.github.com/repos/org/claims"
GITLAB_API = "https://gitlab.example.com/api/v4/projects/platform%2Fclaims"
GITEA_API = "https://gitea.example.com/api/v1/repos/org/claims"


def test_the_webhook_providers_have_adapters() -> None:
    assert {"github": GitHub, "gitlab": GitLab, "gitea": Gitea} == FORGES


def test_github_requests() -> None:
    github = GitHub(GITHUB_API + "/", TOKEN)
    headers = {
        "Accept": "application/vnd.github+json",
        "Authorization": f"Bearer {TOKEN}",
        "X-GitHub-Api-Version": "2022-11-28",
    }
    listing = github.list_comments(7)
    assert (listing.method, listing.url, listing.headers, listing.params) == (
        "GET",
        f"{GITHUB_API}/issues/7/comments",
        headers,
        {"per_page": "100"},
    )
    created = github.create_comment(7, "plan")
    assert (created.method, created.url, created.json) == (
        "POST",
        f"{GITHUB_API}/issues/7/comments",
        {"body": "plan"},
    )
    updated = github.update_comment(7, 42, "plan")
    assert (updated.method, updated.url, updated.json) == (
        "PATCH",
        f"{GITHUB_API}/issues/comments/42",
        {"body": "plan"},
    )
    status = github.set_status(SHA, State.FAILURE, "klutch-gitops/plan/team-a", "1 failure", "u")
    assert (status.method, status.url, status.json) == (
        "POST",
        f"{GITHUB_API}/statuses/{SHA}",
        {
            "state": "failure",
            "context": "klutch-gitops/plan/team-a",
            "description": "1 failure",
            "target_url": "u",
        },
    )
    assert "target_url" not in (github.set_status(SHA, State.PENDING, "c", "d", None).json or {})


def test_gitea_requests_are_githubs_with_its_token_header() -> None:
    gitea = Gitea(GITEA_API, TOKEN)
    assert gitea.headers() == {"Accept": "application/json", "Authorization": f"token {TOKEN}"}
    listing = gitea.list_comments(7)
    assert (listing.url, listing.params) == (f"{GITEA_API}/issues/7/comments", {})
    assert gitea.update_comment(7, 42, "plan").url == f"{GITEA_API}/issues/comments/42"
    status = gitea.set_status(SHA, State.ERROR, "ctx", "no plan", None)
    assert (status.url, status.json) == (
        f"{GITEA_API}/statuses/{SHA}",
        {"state": "error", "context": "ctx", "description": "no plan"},
    )


def test_gitlab_requests() -> None:
    gitlab = GitLab(GITLAB_API, TOKEN)
    assert gitlab.headers() == {"Accept": "application/json", "PRIVATE-TOKEN": TOKEN}
    listing = gitlab.list_comments(7)
    assert (listing.method, listing.url, listing.params) == (
        "GET",
        f"{GITLAB_API}/merge_requests/7/notes",
        {"per_page": "100", "sort": "asc", "order_by": "created_at"},
    )
    created = gitlab.create_comment(7, "plan")
    assert (created.method, created.url, created.json) == (
        "POST",
        f"{GITLAB_API}/merge_requests/7/notes",
        {"body": "plan"},
    )
    updated = gitlab.update_comment(7, 42, "plan")
    assert (updated.method, updated.url, updated.json) == (
        "PUT",
        f"{GITLAB_API}/merge_requests/7/notes/42",
        {"body": "plan"},
    )
    states = {
        state: (gitlab.set_status(SHA, state, "ctx", "d", None).json or {})["state"]
        for state in State
    }
    assert states == {
        State.PENDING: "pending",
        State.SUCCESS: "success",
        State.FAILURE: "failed",
        State.ERROR: "failed",
    }
    status = gitlab.set_status(SHA, State.SUCCESS, "ctx", "clean", "u")
    assert (status.url, status.json) == (
        f"{GITLAB_API}/statuses/{SHA}",
        {"state": "success", "name": "ctx", "description": "clean", "target_url": "u"},
    )


class FakeForge:
    """Comments in memory behind a MockTransport; every request is recorded."""

    def __init__(self, comments: list[dict], page_size: int = 100) -> None:
        self.comments = comments
        self.page_size = page_size
        self.requests: list[httpx.Request] = []
        self.answer: Callable[[httpx.Request], httpx.Response | None] = lambda request: None

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self.handle)

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answer(request)
        if answer is not None:
            return answer
        path = request.url.path
        if request.method == "GET":
            page = int(request.url.params.get("page", "1"))
            items = self.comments[(page - 1) * self.page_size : page * self.page_size]
            headers = {}
            if page * self.page_size < len(self.comments):
                headers["Link"] = f'<{request.url.copy_set_param("page", page + 1)}>; rel="next"'
            return httpx.Response(200, json=items, headers=headers)
        body = json.loads(request.content) if request.content else {}
        if request.method == "POST" and path.endswith("/comments"):
            comment = {"id": 100 + len(self.comments), "body": body["body"], "html_url": "h"}
            self.comments.append(comment)
            return httpx.Response(201, json=comment)
        if request.method == "POST" and path.endswith("/notes"):
            note = {"id": 100 + len(self.comments), "body": body["body"], "system": False}
            self.comments.append(note)
            return httpx.Response(201, json=note)
        if request.method in ("PATCH", "PUT"):
            comment_id = int(path.rsplit("/", 1)[1])
            comment = next(c for c in self.comments if c["id"] == comment_id)
            comment["body"] = body["body"]
            return httpx.Response(200, json=comment)
        return httpx.Response(201, json={"state": body.get("state")})


def test_our_comment_is_found_on_a_later_page_and_edited() -> None:
    others = [{"id": n, "body": f"looks good {n}", "html_url": "x"} for n in range(1, 5)]
    ours = {"id": 5, "body": f"{MARKER}\nold plan", "html_url": "https://github.com/c/5"}
    quoted = {"id": 6, "body": f"> {MARKER}\n> old plan\nwhy?", "html_url": "x"}
    forge = FakeForge([*others, ours, quoted], page_size=2)
    github = GitHub(GITHUB_API, TOKEN, forge.transport())
    comment = github.upsert_comment(7, MARKER, f"{MARKER}\nnew plan")
    assert (comment.id, comment.url) == (5, "https://github.com/c/5")
    assert ours["body"] == f"{MARKER}\nnew plan"
    assert len(forge.comments) == 6  # nothing added
    assert [(r.method, r.url.params.get("page")) for r in forge.requests] == [
        ("GET", None),
        ("GET", "2"),
        ("GET", "3"),
        ("PATCH", None),
    ]
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in forge.requests)


def test_a_comment_is_made_once_then_edited() -> None:
    forge = FakeForge([{"id": 1, "body": "first!", "html_url": "x"}])
    gitea = Gitea(GITEA_API, TOKEN, forge.transport())
    gitea.upsert_comment(7, MARKER, f"{MARKER}\nplan 1")
    gitea.upsert_comment(7, MARKER, f"{MARKER}\nplan 2")
    assert [c["body"] for c in forge.comments] == ["first!", f"{MARKER}\nplan 2"]
    assert [r.method for r in forge.requests] == ["GET", "POST", "GET", "PATCH"]


def test_gitlab_skips_system_notes_and_edits_its_note() -> None:
    system = {"id": 1, "body": f"{MARKER} mentioned in commit", "system": True}
    forge = FakeForge([system])
    gitlab = GitLab(GITLAB_API, TOKEN, forge.transport())
    first = gitlab.upsert_comment(7, MARKER, f"{MARKER}\nplan 1")
    second = gitlab.upsert_comment(7, MARKER, f"{MARKER}\nplan 2")
    assert first.id == second.id != 1
    assert [r.method for r in forge.requests] == ["GET", "POST", "GET", "PUT"]
    assert forge.requests[-1].url.raw_path == (
        f"/api/v4/projects/platform%2Fclaims/merge_requests/7/notes/{first.id}".encode()
    )
    assert forge.requests[-1].headers["PRIVATE-TOKEN"] == TOKEN


def test_a_status_description_is_cut_to_what_github_takes() -> None:
    forge = FakeForge([])
    GitHub(GITHUB_API, TOKEN, forge.transport()).post_status(
        SHA, State.FAILURE, "ctx", "x" * 500, None
    )
    assert len(json.loads(forge.requests[0].content)["description"]) == MAX_DESCRIPTION


def test_gitlab_posting_the_state_a_status_has_is_no_failure() -> None:
    forge = FakeForge([])
    forge.answer = lambda request: httpx.Response(
        400, json={"message": "Cannot transition status via :enqueue from :pending"}
    )
    GitLab(GITLAB_API, TOKEN, forge.transport()).post_status(SHA, State.PENDING, "c", "d", None)
    with pytest.raises(ForgeError):
        GitHub(GITHUB_API, TOKEN, forge.transport()).post_status(SHA, State.PENDING, "c", "d", None)


def test_a_refusal_names_the_request_and_the_fix_but_not_the_token() -> None:
    forge = FakeForge([])
    forge.answer = lambda request: httpx.Response(403, json={"message": "Resource not accessible"})
    with pytest.raises(ForgeError) as raised:
        GitHub(GITHUB_API, TOKEN, forge.transport()).upsert_comment(7, MARKER, MARKER)
    error = raised.value
    assert f"GET {GITHUB_API}/issues/7/comments" in error.message
    assert "403" in error.message
    assert "Resource not accessible" in error.message
    assert "forgeToken" in error.fix
    assert TOKEN not in str(error)


def test_an_unreachable_forge_is_a_forge_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(ForgeError, match="ConnectError"):
        Gitea(GITEA_API, TOKEN, httpx.MockTransport(refuse)).post_status(
            SHA, State.SUCCESS, "c", "d", None
        )


def test_a_comment_list_that_is_no_list_is_refused() -> None:
    forge = FakeForge([])
    forge.answer = lambda request: httpx.Response(200, json={"message": "a login page"})
    with pytest.raises(ForgeError, match="not a list"):
        GitHub(GITHUB_API, TOKEN, forge.transport()).upsert_comment(7, MARKER, MARKER)


# The API roots as documented: GitHub.com https://api.github.com; GitHub Enterprise Server
# http(s)://HOSTNAME/api/v3 (docs.github.com/en/enterprise-server@3.10/rest/enterprise-admin,
# "Endpoint URLs"); Gitea /api/v1 under its root URL (docs.gitea.com/development/api-usage);
# GitLab /api/v4/projects/:id, where :id may be the URL-encoded path (docs.gitlab.com/ee/api/rest,
# "Namespaced paths").
@pytest.mark.parametrize(
    ("provider", "url", "project_path", "api"),
    [
        ("github", "https://github.com/org/claims.git", None, GITHUB_API),
        ("github", "git@github.com:org/claims.git", None, GITHUB_API),
        ("github", "ssh://git@github.com/org/claims", None, GITHUB_API),
        (
            "github",
            "https://ghe.example.com:8443/org/claims",
            None,
            "https://ghe.example.com:8443/api/v3/repos/org/claims",
        ),
        ("gitea", "https://gitea.example.com/org/claims.git", None, GITEA_API),
        ("gitea", "ssh://git@gitea.example.com:2222/org/claims.git", None, GITEA_API),
        (
            "gitea",
            "http://127.0.0.1:3000/git/org/claims.git",  # a platform registration, sub-path
            None,
            "http://127.0.0.1:3000/git/api/v1/repos/org/claims",
        ),
        ("gitlab", "git@gitlab.example.com:platform/claims.git", "platform/claims", GITLAB_API),
        (
            "gitlab",
            "https://example.com/gitlab/platform/team/claims.git",  # a relative URL root
            "platform/team/claims",
            "https://example.com/gitlab/api/v4/projects/platform%2Fteam%2Fclaims",
        ),
        (
            "gitlab",  # a payload's path that the registered URL does not end with is ignored
            "https://gitlab.example.com/platform/claims",
            "victim/other",
            GITLAB_API,
        ),
    ],
)
def test_the_api_comes_from_the_registered_url(
    provider: str, url: str, project_path: str | None, api: str
) -> None:
    assert repository_api(provider, url, project_path) == api


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("file:///srv/claims.git", "is not on a forge"),
        ("https://gitea.example.com/a/../claims", "no repository path of plain names"),
        ("https://gitea.example.com/claims", "names no OWNER/REPO path"),
        ("https://gitea.example.com:99999/org/claims", "invalid port"),
    ],
)
def test_urls_that_name_no_forge_api_are_refused(url: str, problem: str) -> None:
    with pytest.raises(NoForgeAPI, match=problem):
        repository_api("gitea", url)


def test_a_next_page_on_another_server_is_not_followed_with_the_token() -> None:
    forge = FakeForge([{"id": 1, "body": "hi", "html_url": "x"}])
    forge.answer = lambda request: (
        httpx.Response(200, json=[], headers={"Link": '<https://evil.example/x>; rel="next"'})
        if request.url.host == "api.github.com"
        else None
    )
    with pytest.raises(ForgeError, match="another server"):
        GitHub(GITHUB_API, TOKEN, forge.transport()).upsert_comment(7, MARKER, MARKER)
    assert [r.url.host for r in forge.requests] == ["api.github.com"]
