"""Webhook parsing and verification, per registration, against the providers' documented
payloads and headers; the router through FastAPI's TestClient."""

import hashlib
import hmac
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from reconciler.triggers.deliveries import Deliveries
from reconciler.triggers.payloads import MAX_DEPTH, nesting_depth
from reconciler.triggers.webhook_events import PullRequestEvent, PushEvent, WebhookError
from reconciler.triggers.webhooks import (
    MAX_BODY,
    inspect,
    parse_pull_request,
    parse_push,
    webhook_router,
)

SECRET = b"s3cret-webhook-key"
OTHER_SECRET = b"rotated-key"
B_SECRET = b"team-b-webhook-key"
AFTER = "a" * 40
ZERO = "0" * 40

# normalized URL -> (registration, secret) pairs; "team-b" has its own repository and secret
REGISTERED = {
    "github.com/org/claims": [("gh-old", OTHER_SECRET), ("gh", SECRET)],
    "gitlab.example.com/platform/team/claims": [("gl", SECRET)],
    "gitea.example.com/org/claims": [("gt", SECRET)],
    "github.com/team-b/claims": [("team-b", B_SECRET)],
    "gitea.example.com/team-b/claims": [("team-b-gitea", B_SECRET)],
}
VERIFIED = {"github": frozenset({"gh"}), "gitlab": frozenset({"gl"}), "gitea": frozenset({"gt"})}


def secret_for(urls: frozenset[str]) -> Sequence[tuple[str, bytes]]:
    return [pair for url in sorted(urls) for pair in REGISTERED.get(url, [])]


# Payloads trimmed from the providers' documented examples, keeping their shape.
def github_push(ref: str = "refs/heads/main", after: str = AFTER, **extra: Any) -> dict[str, Any]:
    return {
        "ref": ref,
        "before": "b" * 40,
        "after": after,
        "created": False,
        "deleted": False,
        "forced": False,
        "base_ref": None,
        "compare": "https://github.com/org/claims/compare/bbbbbbbbbbbb...aaaaaaaaaaaa",
        "commits": [{"id": after, "message": "Add a PostgresqlInstance", "distinct": True}],
        "head_commit": {"id": after},
        "repository": {
            "id": 35129377,
            "name": "claims",
            "full_name": "org/claims",
            "private": True,
            "html_url": "https://github.com/org/claims",
            "git_url": "git://github.com/org/claims.git",
            "ssh_url": "git@github.com:org/claims.git",
            "clone_url": "https://github.com/org/claims.git",
            "default_branch": "main",
        },
        "pusher": {"name": "someone", "email": "someone@example.com"},
        "sender": {"login": "someone", "id": 1},
        **extra,
    }


def gitlab_push(ref: str = "refs/heads/main", after: str = AFTER) -> dict[str, Any]:
    return {
        "object_kind": "push",
        "event_name": "push",
        "before": "b" * 40,
        "after": after,
        "ref": ref,
        "ref_protected": True,
        "checkout_sha": None if after == ZERO else after,
        "user_username": "someone",
        "project_id": 15,
        "project": {
            "id": 15,
            "name": "claims",
            "web_url": "https://gitlab.example.com/platform/team/claims",
            "git_ssh_url": "git@gitlab.example.com:platform/team/claims.git",
            "git_http_url": "https://gitlab.example.com/platform/team/claims.git",
            "namespace": "team",
            "path_with_namespace": "platform/team/claims",
            "default_branch": "main",
        },
        "commits": [{"id": after, "message": "Add a PostgresqlInstance"}],
        "total_commits_count": 1,
        "repository": {"name": "claims", "url": "git@gitlab.example.com:platform/team/claims.git"},
    }


def gitea_push(ref: str = "refs/heads/main", after: str = AFTER) -> dict[str, Any]:
    return {
        "ref": ref,
        "before": "b" * 40,
        "after": after,
        "compare_url": "https://gitea.example.com/org/claims/compare/bbbb...aaaa",
        "commits": [{"id": after, "message": "Add a PostgresqlInstance\n"}],
        "total_commits": 1,
        "head_commit": {"id": after},
        "repository": {
            "id": 1,
            "owner": {"login": "org"},
            "name": "claims",
            "full_name": "org/claims",
            "private": False,
            "html_url": "https://gitea.example.com/org/claims",
            "ssh_url": "git@gitea.example.com:org/claims.git",
            "clone_url": "https://gitea.example.com/org/claims.git",
            "default_branch": "main",
        },
        "pusher": {"login": "someone"},
        "sender": {"login": "someone"},
    }


def github_headers(body: bytes, event: str = "push", secret: bytes = SECRET) -> dict[str, str]:
    signature = hmac.new(secret, body, hashlib.sha256).hexdigest()
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
        "X-Hub-Signature-256": f"sha256={signature}",
        "Content-Type": "application/json",
    }


def gitlab_headers(body: bytes, event: str = "Push Hook", secret: bytes = SECRET) -> dict[str, str]:
    return {
        "X-Gitlab-Event": event,
        "X-Gitlab-Token": secret.decode(),
        "Content-Type": "application/json",
    }


def gitea_headers(body: bytes, event: str = "push", secret: bytes = SECRET) -> dict[str, str]:
    return {
        "X-Gitea-Event": event,
        "X-Gitea-Signature": hmac.new(secret, body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }


Headers = Callable[..., dict[str, str]]
PROVIDERS: dict[str, tuple[Callable[..., dict[str, Any]], Headers, str, str]] = {
    # provider: payload, headers, the header carrying the secret, a non-push event
    "github": (github_push, github_headers, "X-Hub-Signature-256", "ping"),
    "gitlab": (gitlab_push, gitlab_headers, "X-Gitlab-Token", "Issue Hook"),
    "gitea": (gitea_push, gitea_headers, "X-Gitea-Signature", "create"),
}
EXPECTED_URLS = {
    "github": frozenset({"github.com/org/claims"}),
    "gitlab": frozenset({"gitlab.example.com/platform/team/claims"}),
    "gitea": frozenset({"gitea.example.com/org/claims"}),
}


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


@pytest.fixture
def pushes() -> list[PushEvent]:
    return []


@pytest.fixture
def pulls() -> list[PullRequestEvent]:
    return []


@pytest.fixture
def client(pushes: list[PushEvent], pulls: list[PullRequestEvent]) -> Iterator[TestClient]:
    def on_push(event: PushEvent) -> int:
        pushes.append(event)
        return 2

    def on_pull_request(event: PullRequestEvent) -> int:
        pulls.append(event)
        return 1

    app = FastAPI()
    app.include_router(webhook_router(secret_for, on_push, on_pull_request))
    with TestClient(app) as test_client:
        yield test_client


@pytest.fixture(params=sorted(PROVIDERS))
def provider(request: pytest.FixtureRequest) -> str:
    return request.param


def refusal(provider: str, headers: dict[str, str], body: bytes) -> WebhookError:
    with pytest.raises(WebhookError) as raised:
        parse_push(provider, headers, body, secret_for)
    return raised.value


def test_valid_push(provider: str, client: TestClient, pushes: list[PushEvent]) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    body = encode(payload(ref="refs/heads/feature/x"))
    expected = PushEvent(
        provider,
        EXPECTED_URLS[provider],
        VERIFIED[provider],
        "feature/x",
        AFTER,
        headers(body).get("X-GitHub-Delivery", ""),
        hashlib.sha256(body).hexdigest(),
    )

    assert parse_push(provider, headers(body), body, secret_for) == expected
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
    assert (response.status_code, response.json()) == (202, {"triggered": 2})
    assert pushes == [expected]


def test_headers_are_case_insensitive(provider: str) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    body = encode(payload())
    lowered = {name.lower(): value for name, value in headers(body).items()}
    upper = {name.upper(): value for name, value in headers(body).items()}
    assert parse_push(provider, lowered, body, secret_for) is not None
    assert parse_push(provider, upper, body, secret_for) is not None


def test_bad_signature_is_401(provider: str, client: TestClient, pushes: list[PushEvent]) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    body = encode(payload())
    forged = headers(body, secret=b"guessed")
    assert refusal(provider, forged, body).status_code == 401
    response = client.post(f"/webhooks/{provider}", content=body, headers=forged)
    assert response.status_code == 401
    assert "error" in response.json()
    assert pushes == []


@pytest.mark.parametrize("signing_provider", ["github", "gitea"])
def test_signature_over_another_body_is_401(signing_provider: str) -> None:
    payload, headers, _, _ = PROVIDERS[signing_provider]
    signed = headers(encode(payload()))
    tampered = encode(payload(ref="refs/heads/prod"))
    assert refusal(signing_provider, signed, tampered).status_code == 401


def test_missing_signature_is_401(provider: str, client: TestClient) -> None:
    payload, headers, secret_header, _ = PROVIDERS[provider]
    body = encode(payload())
    unsigned = {k: v for k, v in headers(body).items() if k != secret_header}
    assert refusal(provider, unsigned, body).status_code == 401
    response = client.post(f"/webhooks/{provider}", content=body, headers=unsigned)
    assert response.status_code == 401
    assert secret_header in response.json()["error"]


def test_unregistered_repository_is_404(provider: str, client: TestClient) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    text = json.dumps(payload()).replace("claims", "unknown")
    body = text.encode()
    assert refusal(provider, headers(body), body).status_code == 404
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
    assert response.status_code == 404


def test_non_push_event_is_ignored(provider: str, client: TestClient) -> None:
    payload, headers, _, event = PROVIDERS[provider]
    body = encode(payload())
    assert parse_push(provider, headers(body, event=event), body, secret_for) is None
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body, event))
    assert response.status_code == 200
    assert "not pushes" in response.json()["ignored"]


def test_non_push_event_naming_a_repository_is_verified(provider: str) -> None:
    payload, headers, _, event = PROVIDERS[provider]
    body = encode(payload())
    assert refusal(provider, headers(body, event, b"wrong"), body).status_code == 401


def test_github_ping_without_repository_is_ignored(client: TestClient) -> None:
    body = encode({"zen": "Keep it logically awesome.", "hook_id": 1, "hook": {"type": "Org"}})
    response = client.post("/webhooks/github", content=body, headers=github_headers(body, "ping"))
    assert response.status_code == 200
    assert response.json() == {"ignored": "'ping' events are not pushes or pull requests"}


def test_branch_deletion_is_ignored(
    provider: str,
    client: TestClient,
    pushes: list[PushEvent],
    caplog: pytest.LogCaptureFixture,
) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    if provider == "github":
        body = encode(payload(after=ZERO, deleted=True))
    else:
        body = encode(payload(after=ZERO))
    with caplog.at_level(logging.INFO, logger="reconciler.triggers.webhooks"):
        assert parse_push(provider, headers(body), body, secret_for) is None
    assert "was deleted" in caplog.text
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
    assert (response.status_code, response.json()) == (
        200,
        {"ignored": "branch 'main' was deleted"},
    )
    assert pushes == []


def test_tag_push_is_ignored(provider: str) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    body = encode(payload(ref="refs/tags/v1.0.0"))
    assert parse_push(provider, headers(body), body, secret_for) is None


def test_malformed_json_is_400(provider: str, client: TestClient) -> None:
    _, headers, _, _ = PROVIDERS[provider]
    body = b'{"ref": "refs/heads/main", '
    assert refusal(provider, headers(body), body).status_code == 400
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
    assert response.status_code == 400
    assert "JSON" in response.json()["error"]


@pytest.mark.parametrize("missing", ["ref", "repository"])
def test_missing_fields_are_400(provider: str, missing: str) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    document = payload()
    del document["project" if missing == "repository" and provider == "gitlab" else missing]
    body = encode(document)
    assert refusal(provider, headers(body), body).status_code == 400


def test_oversize_body_is_413(provider: str, client: TestClient) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    document = payload()
    document["padding"] = "x" * MAX_BODY
    body = encode(document)
    assert refusal(provider, headers(body), body).status_code == 413
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
    assert response.status_code == 413


def test_oversize_body_without_content_length_is_413(client: TestClient) -> None:
    chunk = b"x" * 65536
    chunks = iter([chunk] * (MAX_BODY // len(chunk) + 1))
    response = client.post("/webhooks/github", content=chunks, headers=github_headers(b""))
    assert response.status_code == 413


def test_unknown_provider_is_404(client: TestClient) -> None:
    body = encode(github_push())
    assert refusal("bitbucket", github_headers(body), body).status_code == 404
    response = client.post("/webhooks/bitbucket", content=body, headers=github_headers(body))
    assert response.status_code == 404


def test_github_form_encoded_payload() -> None:
    body = urlencode({"payload": json.dumps(github_push())}).encode()
    headers = github_headers(body) | {"Content-Type": "application/x-www-form-urlencoded"}
    event = parse_push("github", headers, body, secret_for)
    assert event is not None
    assert event.branch == "main"


def test_empty_registered_secret_never_verifies() -> None:
    body = encode(github_push())

    def empty_secret(urls: frozenset[str]) -> Sequence[tuple[str, bytes]]:
        return [("gh", b"")]

    with pytest.raises(WebhookError) as raised:
        parse_push("github", github_headers(body, secret=b""), body, empty_secret)
    assert raised.value.status_code == 404


def test_secrets_and_signatures_stay_out_of_logs(
    provider: str, client: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    payload, headers, secret_header, _ = PROVIDERS[provider]
    body = encode(payload())
    with caplog.at_level(logging.DEBUG):
        client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
        client.post(f"/webhooks/{provider}", content=body, headers=headers(body, secret=b"wrong"))
        client.post(f"/webhooks/{provider}", content=body, headers=headers(body))  # a replay
    signatures = {headers(body)[secret_header], headers(body, secret=b"wrong")[secret_header]}
    for record in caplog.records:
        text = record.getMessage() + repr(record.__dict__)
        assert SECRET.decode() not in text
        assert not any(signature in text for signature in signatures)


# -- pull requests ------------------------------------------------------------------------------
HEAD = "c" * 40


def github_pull(action: str = "opened", **extra: Any) -> dict[str, Any]:
    """GitHub's pull_request event, trimmed from the documented example (github/docs
    content/webhooks/webhook-events-and-payloads.md, "pull_request")."""
    repository = github_push()["repository"] | {"url": "https://api.github.com/repos/org/claims"}
    return {
        "action": action,
        "number": 7,
        "pull_request": {
            "url": "https://api.github.com/repos/org/claims/pulls/7",
            "id": 1,
            "number": 7,
            "state": "open",
            "title": "Smaller database",
            "head": {"label": "org:downgrade", "ref": "downgrade", "sha": HEAD, "repo": repository},
            "base": {"label": "org:main", "ref": "main", "sha": "b" * 40, "repo": repository},
        },
        "repository": repository,
        "sender": {"login": "someone", "id": 1},
        **extra,
    }


def gitea_pull(action: str = "opened", **extra: Any) -> dict[str, Any]:
    """Gitea's pull_request event (GitHub's shape; ``repository.url`` is the API URL)."""
    repository = gitea_push()["repository"] | {
        "url": "https://gitea.example.com/api/v1/repos/org/claims"
    }
    return {
        "action": action,
        "number": 7,
        "pull_request": {
            "id": 1,
            "url": "https://gitea.example.com/org/claims/pulls/7",
            "number": 7,
            "state": "open",
            "head": {"label": "downgrade", "ref": "downgrade", "sha": HEAD, "repo_id": 1},
            "base": {"label": "main", "ref": "main", "sha": "b" * 40, "repo_id": 1},
        },
        "repository": repository,
        "sender": {"login": "someone"},
        **extra,
    }


def gitlab_merge_request(action: str = "open", **attributes: Any) -> dict[str, Any]:
    """GitLab's Merge Request Hook, trimmed from the documented example."""
    return {
        "object_kind": "merge_request",
        "event_type": "merge_request",
        "user": {"username": "someone"},
        "project": gitlab_push()["project"],
        "object_attributes": {
            "id": 99,
            "iid": 7,
            "target_branch": "main",
            "source_branch": "downgrade",
            "source_project_id": 15,
            "target_project_id": 15,
            "state": "opened",
            "action": action,
            "last_commit": {"id": HEAD, "message": "Smaller database"},
            "url": "https://gitlab.example.com/platform/team/claims/-/merge_requests/7",
            **attributes,
        },
        "changes": {},
        "repository": {
            "name": "claims",
            "homepage": "https://gitlab.example.com/platform/team/claims",
        },
    }


PULLS: dict[str, tuple[Callable[..., dict[str, Any]], str, str, str | None]] = {
    # provider: payload, its event header value, the head ref, the project path
    "github": (github_pull, "pull_request", "refs/pull/7/head", None),
    "gitlab": (
        gitlab_merge_request,
        "Merge Request Hook",
        "refs/merge-requests/7/head",
        "platform/team/claims",
    ),
    "gitea": (gitea_pull, "pull_request", "refs/pull/7/head", None),
}


def pull_request(provider: str, payload: dict[str, Any], secret: bytes = SECRET) -> Any:
    _, headers, _, _ = PROVIDERS[provider]
    body = encode(payload)
    return parse_pull_request(provider, headers(body, PULLS[provider][1], secret), body, secret_for)


def test_a_pull_request_to_plan(
    provider: str, client: TestClient, pulls: list[PullRequestEvent], pushes: list[PushEvent]
) -> None:
    payload, event, head_ref, project_path = PULLS[provider]
    body = encode(payload())
    headers = PROVIDERS[provider][1](body, event)
    expected = PullRequestEvent(
        provider,
        EXPECTED_URLS[provider],
        VERIFIED[provider],
        7,
        "main",
        "downgrade",
        HEAD,
        head_ref,
        project_path,
        headers.get("X-GitHub-Delivery", ""),
        hashlib.sha256(body).hexdigest(),
    )
    assert pull_request(provider, payload()) == expected
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers)
    assert (response.status_code, response.json()) == (202, {"triggered": 1})
    assert (pulls, pushes) == ([expected], [])


@pytest.mark.parametrize(
    ("provider", "action"),
    [
        ("github", "synchronize"),
        ("github", "reopened"),
        ("gitea", "synchronized"),
        ("gitea", "reopened"),
        ("gitlab", "reopen"),
    ],
)
def test_new_commits_and_reopening_are_planned(provider: str, action: str) -> None:
    payload = PULLS[provider][0]
    extra = {"oldrev": "b" * 40} if provider == "gitlab" else {}
    assert pull_request(provider, payload(action, **extra)) is not None


@pytest.mark.parametrize(
    ("provider", "action"),
    [
        ("github", "closed"),
        ("github", "labeled"),
        ("gitea", "closed"),
        ("gitea", "review_requested"),
        ("gitlab", "close"),
        ("gitlab", "merge"),
        ("gitlab", "approved"),
    ],
)
def test_other_actions_are_ignored(provider: str, action: str, client: TestClient) -> None:
    payload, event, _, _ = PULLS[provider]
    assert pull_request(provider, payload(action)) is None
    body = encode(payload(action))
    headers = PROVIDERS[provider][1](body, event)
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers)
    assert response.status_code == 200
    assert "needs no plan" in response.json()["ignored"]


def test_an_edit_is_planned_only_when_it_moved_the_base() -> None:
    title = {"title": {"from": "Old title"}}
    assert pull_request("github", github_pull("edited", changes=title)) is None
    moved = {"base": {"ref": {"from": "develop"}, "sha": {"from": "d" * 40}}}
    assert pull_request("github", github_pull("edited", changes=moved)) is not None
    assert pull_request("gitea", gitea_pull("edited", changes=title)) is None
    assert pull_request("gitea", gitea_pull("edited", changes={"ref": {"from": "dev"}})) is not None


def test_a_gitlab_update_is_planned_only_with_new_commits_or_a_new_target_branch() -> None:
    assert pull_request("gitlab", gitlab_merge_request("update")) is None  # a label, a title
    assert pull_request("gitlab", gitlab_merge_request("update", oldrev="b" * 40)) is not None
    retargeted = gitlab_merge_request("update")
    retargeted["changes"] = {"target_branch": {"previous": "develop", "current": "main"}}
    assert pull_request("gitlab", retargeted) is not None


def test_a_pull_request_with_a_wrong_signature_is_401(provider: str, client: TestClient) -> None:
    payload, event, _, _ = PULLS[provider]
    with pytest.raises(WebhookError) as raised:
        pull_request(provider, payload(), secret=b"guessed")
    assert raised.value.status_code == 401
    body = encode(payload())
    forged = PROVIDERS[provider][1](body, event, b"guessed")
    assert client.post(f"/webhooks/{provider}", content=body, headers=forged).status_code == 401


@pytest.mark.parametrize(
    ("provider", "path"),
    [
        ("github", "pull_request.head.sha"),
        ("github", "pull_request.number"),
        ("gitea", "pull_request.base.ref"),
        ("gitlab", "object_attributes.last_commit.id"),
        ("gitlab", "project.path_with_namespace"),
    ],
)
def test_a_pull_request_lacking_a_field_is_400(provider: str, path: str) -> None:
    payload = PULLS[provider][0]()
    *parents, last = path.split(".")
    node = payload
    for key in parents:
        node = node[key]
    del node[last]
    with pytest.raises(WebhookError) as raised:
        pull_request(provider, payload)
    assert raised.value.status_code == 400
    assert path in raised.value.message


# -- one registration's secret never unlocks another's -------------------------------------------
def naming_b_too(provider: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with team B's repository in one of the URL fields it also reads."""
    field = "project" if provider == "gitlab" else "repository"
    other = {"github": "https://github.com/team-b/claims.git"}.get(
        provider, "https://gitea.example.com/team-b/claims.git"
    )
    key = "git_ssh_url" if provider == "gitlab" else "ssh_url"
    return payload | {field: payload[field] | {key: other}}


@pytest.mark.parametrize("provider", ["github", "gitea"])
def test_a_push_signed_with_a_secret_triggers_only_that_registration(
    provider: str, client: TestClient, pushes: list[PushEvent]
) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    body = encode(naming_b_too(provider, payload()))
    event = parse_push(provider, headers(body), body, secret_for)
    assert event is not None
    assert len(event.urls) == 2  # both named…
    assert event.registrations == VERIFIED[provider]  # …only the signer's is triggered
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
    assert response.status_code == 202
    assert [p.registrations for p in pushes] == [VERIFIED[provider]]


def test_a_pull_request_signed_by_one_registration_reaches_no_other(
    client: TestClient, pulls: list[PullRequestEvent]
) -> None:
    body = encode(naming_b_too("github", github_pull()))
    response = client.post(
        "/webhooks/github", content=body, headers=github_headers(body, "pull_request")
    )
    assert response.status_code == 202
    assert [p.registrations for p in pulls] == [frozenset({"gh"})]


def test_every_secret_of_a_repository_is_tried_and_each_verifies_only_its_own() -> None:
    body = encode(github_push())
    old = parse_push("github", github_headers(body, secret=OTHER_SECRET), body, secret_for)
    assert old is not None
    assert old.registrations == frozenset({"gh-old"})
    b = refusal("github", github_headers(body, secret=B_SECRET), body)  # B's secret, A's URL
    assert (b.status_code, b.message) == (
        401,
        "X-Hub-Signature-256 matches the webhook secret of no registration of this repository",
    )


def test_the_payload_names_no_api_to_post_to() -> None:
    payload = github_pull()
    payload["repository"] = payload["repository"] | {"url": "https://evil.example:8443/steal"}
    event = pull_request("github", payload)
    assert "evil" not in repr(event)  # where to post comes from the registration alone


# -- hostile bodies -------------------------------------------------------------------------------
def test_nesting_depth_counts_brackets_outside_strings_only() -> None:
    assert nesting_depth('{"a": [1, {"b": "[[[{{{"}], "c": "\\"]]"}') == 3
    assert nesting_depth("[]" * 1000) == 1
    assert nesting_depth("") == 0


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 200_000])
def test_a_deeply_nested_body_is_a_400_before_any_secret_is_tried(
    provider: str, client: TestClient, depth: int
) -> None:
    _, headers, _, _ = PROVIDERS[provider]
    body = b"[" * depth + b"]" * depth
    asked: list[frozenset[str]] = []

    def candidates(urls: frozenset[str]) -> Sequence[tuple[str, bytes]]:
        asked.append(urls)
        return secret_for(urls)

    with pytest.raises(WebhookError) as raised:
        inspect(provider, headers(body), body, candidates)
    message = f"payload nests deeper than {MAX_DEPTH} levels; no forge sends that"
    assert (raised.value.status_code, raised.value.message) == (400, message)
    assert asked == []
    response = client.post(f"/webhooks/{provider}", content=body, headers=headers(body))
    assert (response.status_code, response.json()) == (400, {"error": message})


def test_a_deep_object_inside_a_valid_payload_is_a_400(client: TestClient) -> None:
    document = github_push(padding=json.loads("[" * 100 + "]" * 100))
    body = encode(document)
    response = client.post("/webhooks/github", content=body, headers=github_headers(body))
    assert response.status_code == 400
    assert "nests deeper" in response.json()["error"]


def test_a_huge_number_is_a_400_not_a_500(client: TestClient) -> None:
    body = b'{"ref": ' + b"9" * 5000 + b"}"
    response = client.post("/webhooks/github", content=body, headers=github_headers(body))
    assert response.status_code == 400
    assert response.json()["error"].startswith("payload is not JSON")


# -- replays --------------------------------------------------------------------------------------
def test_a_replayed_delivery_triggers_nothing(
    provider: str, client: TestClient, pushes: list[PushEvent]
) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    body = encode(payload())
    url = f"/webhooks/{provider}"
    assert client.post(url, content=body, headers=headers(body)).status_code == 202
    replay = client.post(url, content=body, headers=headers(body))
    assert (replay.status_code, replay.json()) == (
        200,
        {"ignored": "this delivery was received already; a replay triggers nothing"},
    )
    renamed = headers(body) | {"X-GitHub-Delivery": "new", "X-Gitea-Delivery": "new"}
    renamed["Idempotency-Key"] = "new"
    assert client.post(url, content=body, headers=renamed).status_code == 200  # same body
    assert len(pushes) == 1


@pytest.mark.parametrize("provider", ["github", "gitea"])
def test_a_new_body_under_a_seen_delivery_id_is_a_replay_too(
    provider: str, client: TestClient, pushes: list[PushEvent]
) -> None:
    payload, headers, _, _ = PROVIDERS[provider]
    first, second = encode(payload()), encode(payload(ref="refs/heads/other"))
    fixed = {"X-GitHub-Delivery": "d-1", "X-Gitea-Delivery": "d-1"}
    url = f"/webhooks/{provider}"
    assert client.post(url, content=first, headers=headers(first) | fixed).status_code == 202
    replay = client.post(url, content=second, headers=headers(second) | fixed)
    assert replay.status_code == 200
    assert len(pushes) == 1


def test_one_event_reaches_each_registration_once() -> None:
    """GitHub sends an event's one delivery id to every hook: a second registration of the same
    repository, verified by its own hook's signature, is still triggered."""
    deliveries = Deliveries()
    assert deliveries.admit({"gh"}, "github", "d-1", "body-1") == {"gh"}
    assert deliveries.admit({"gh-old"}, "github", "d-1", "body-1") == {"gh-old"}
    assert deliveries.admit({"gh", "gh-old"}, "github", "d-1", "body-1") == frozenset()


def test_deliveries_are_forgotten_after_the_ttl_and_bounded() -> None:
    now = [0.0]
    deliveries = Deliveries(ttl=10.0, capacity=4, clock=lambda: now[0])
    assert deliveries.admit({"a"}, "github", "d-1", "x") == {"a"}
    now[0] = 9.0
    assert deliveries.admit({"a"}, "github", "d-1", "x") == frozenset()
    now[0] = 10.5
    assert deliveries.admit({"a"}, "github", "d-1", "x") == {"a"}
    assert deliveries.admit({"b"}, "github", "d-b", "y") == {"b"}
    for number in range(10):  # "a" floods its own registration with signed deliveries
        deliveries.admit({"a"}, "github", f"id-{number}", f"body-{number}")
    assert len(deliveries) <= 4 + 2
    assert deliveries.admit({"b"}, "github", "d-b", "y") == frozenset()  # b's record stays


def test_a_delivery_that_failed_may_be_delivered_again() -> None:
    calls: list[PushEvent] = []

    def failing(event: PushEvent) -> int:
        calls.append(event)
        if len(calls) == 1:
            raise RuntimeError("the Control Plane went away")
        return 1

    app = FastAPI()
    app.include_router(webhook_router(secret_for, failing, lambda event: 0))
    body = encode(github_push())
    with TestClient(app, raise_server_exceptions=False) as test_client:
        first = test_client.post("/webhooks/github", content=body, headers=github_headers(body))
        assert first.status_code == 500
        again = test_client.post("/webhooks/github", content=body, headers=github_headers(body))
    assert (again.status_code, again.json()) == (202, {"triggered": 1})
    assert len(calls) == 2
