"""Pull-request review: which registrations a pull request queues, and one review from a real Git
remote (offline plan, the catalog's schemas) to the forge's comment and status, played by
httpx.MockTransport."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest

from klutch_gitops.config import RegistrationSpec
from klutch_gitops.errors import KlutchError
from reconciler.review.forges import State
from reconciler.review.pulls import Reviewer, context, error_comment, marker
from reconciler.sync.connection import Connection
from reconciler.triggers.webhook_events import PullRequestEvent
from tests.kit.specs import registration_spec

API = "https://api.github.com/repos/org/claims"
TOKEN = "t0ken"


def spec(name: str, url: str, branch: str = "main", path: str = "claims") -> RegistrationSpec:
    return registration_spec(name, url, "cluster-abc", ("team",), branch=branch, path=path)


def connection(spec: RegistrationSpec, token: str | None = TOKEN) -> Connection:
    """Without cluster clients: the plan runs offline, against the catalog's schemas."""
    return Connection(spec, None, None, None, (), forge_token=token)  # type: ignore[arg-type]


def event(
    sha: str, number: int = 7, registrations: frozenset[str] = frozenset({"team-a"})
) -> PullRequestEvent:
    return PullRequestEvent(
        "github",
        frozenset({"github.com/org/claims"}),
        registrations,
        number,
        "main",
        "downgrade",
        sha,
        f"refs/pull/{number}/head",
    )


def test_a_pull_request_is_queued_only_for_the_registrations_it_verified_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = "https://github.com/org/claims.git"
    registrations = {
        "a": connection(spec("a", url)),
        "b": connection(spec("b", "git@github.com:org/claims.git", path="other")),
        "develop": connection(spec("develop", url, branch="develop")),
        "no-token": connection(spec("no-token", url), token=None),
        "local": connection(spec("local", "file:///srv/claims.git")),
        "unverified": connection(spec("unverified", url)),
    }
    reviewer = Reviewer(lambda: registrations, tmp_path)
    verified = frozenset({"a", "b", "develop", "no-token", "local", "gone"})
    with caplog.at_level("INFO", logger="reconciler.review.pulls"):
        assert reviewer.submit(event("c" * 40, registrations=verified)) == 2
    assert sorted(reviewer._pending) == [("a", 7), ("b", 7)]  # never "unverified"
    assert len(reviewer.queue) == 2
    assert "no forgeToken" in caplog.text
    assert "no forge API for the registered URL" in caplog.text  # file://: no forge to post to


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def instance(plan: str, extra: str = "") -> str:
    return f"""apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: orders
  namespace: team
spec:
  service: a9s-postgresql14
  plan: {plan}
{extra}"""


class Remote:
    """A bare repository as a forge keeps it: branches, and each pull request's head ref."""

    def __init__(self, tmp_path: Path) -> None:
        self.bare = tmp_path / "claims.git"
        self.work = tmp_path / "person"
        git(tmp_path, "init", "-q", "--bare", "-b", "main", str(self.bare))
        git(tmp_path, "init", "-q", "-b", "main", str(self.work))
        git(self.work, "config", "user.name", "Person")
        git(self.work, "config", "user.email", "person@example.com")
        git(self.work, "remote", "add", "origin", str(self.bare))

    def commit(self, branch: str, files: dict[str, str], pull: int | None = None) -> str:
        """Commit on ``branch`` (made from the current commit when new) and push it."""
        known = subprocess.run(["git", "rev-parse", "--verify", "-q", branch], cwd=self.work)
        git(self.work, "checkout", "-q", *([branch] if known.returncode == 0 else ["-b", branch]))
        for name, text in files.items():
            (self.work / name).parent.mkdir(parents=True, exist_ok=True)
            (self.work / name).write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", "-m", f"change {branch}")
        git(self.work, "push", "-q", "-f", "origin", f"HEAD:refs/heads/{branch}")
        if pull is not None:
            git(self.work, "push", "-q", "-f", "origin", f"HEAD:refs/pull/{pull}/head")
        return git(self.work, "rev-parse", "HEAD")


class Forge:
    """GitHub's comments and statuses in memory."""

    def __init__(self) -> None:
        self.comments: list[dict] = []
        self.statuses: list[tuple[str, dict]] = []
        self.down = False

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        if self.down:
            return httpx.Response(502, text="bad gateway")
        path = request.url.path.removeprefix("/repos/org/claims")
        body = json.loads(request.content) if request.content else {}
        if request.method == "GET" and path == "/issues/7/comments":
            return httpx.Response(200, json=self.comments)
        if request.method == "POST" and path == "/issues/7/comments":
            comment = {"id": len(self.comments) + 1, "body": body["body"], "html_url": "u"}
            self.comments.append(comment)
            return httpx.Response(201, json=comment)
        if request.method == "PATCH" and path.startswith("/issues/comments/"):
            comment = self.comments[int(path.rsplit("/", 1)[1]) - 1]
            comment["body"] = body["body"]
            return httpx.Response(200, json=comment)
        if request.method == "POST" and path.startswith("/statuses/"):
            self.statuses.append((path.removeprefix("/statuses/"), body))
            return httpx.Response(201, json=body)
        return httpx.Response(404, json={"message": "Not Found"})


def reviewer_for(registration: Connection, forge: Forge, tmp_path: Path) -> Reviewer:
    transport = httpx.MockTransport(forge.handle)
    return Reviewer(
        lambda: {"team-a": registration},
        tmp_path / "work",
        transport=transport,
        api=lambda _provider, _url, _path: API,  # the file:// remote's forge is the mock
    )


def test_a_review_posts_one_comment_and_a_status_per_head(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    remote.commit("main", {"claims/orders.yaml": instance("postgresql-single-small")})
    broken = remote.commit(
        "downgrade", {"claims/orders.yaml": instance("postgresql-single-nano", "  sizze: 1\n")}, 7
    )
    forge = Forge()
    registration = connection(spec("team-a", f"file://{remote.bare}"))
    reviewer = reviewer_for(registration, forge, tmp_path)

    reviewer.review(registration, event(broken))
    (comment,) = forge.comments
    assert comment["body"].startswith(marker("team-a") + "\n## klutch-gitops plan: ❌ 1 failure")
    assert "unknown field spec.sizze" in comment["body"]
    assert "`downgrade`" in comment["body"]
    assert [(sha, s["state"], s["context"]) for sha, s in forge.statuses] == [
        (broken, "pending", context("team-a")),
        (broken, "failure", context("team-a")),
    ]
    assert forge.statuses[-1][1]["description"].startswith("1 failure: PostgresqlInstance")
    assert forge.statuses[-1][1]["target_url"] == "u"

    fixed = remote.commit(
        "downgrade", {"claims/orders.yaml": instance("postgresql-single-nano")}, 7
    )
    reviewer.review(registration, event(fixed))
    (comment,) = forge.comments  # edited, not added
    assert "✅ clean" in comment["body"]
    assert forge.statuses[-1] == (
        fixed,
        {
            "state": "success",
            "context": context("team-a"),
            "description": "clean: 1 to change",
            "target_url": "u",
        },
    )
    checkout = tmp_path / "work" / "team-a" / "review" / "claims" / "orders.yaml"
    assert "postgresql-single-small" in checkout.read_text()  # the work tree stays on the base


def test_a_merge_conflict_is_posted_with_its_fix(tmp_path: Path) -> None:
    remote = Remote(tmp_path)
    remote.commit("main", {"claims/orders.yaml": instance("postgresql-single-small")})
    head = remote.commit("feature", {"claims/orders.yaml": instance("postgresql-single-big")}, 7)
    remote.commit("main", {"claims/orders.yaml": instance("postgresql-single-nano")})
    forge = Forge()
    registration = connection(spec("team-a", f"file://{remote.bare}"))
    reviewer = reviewer_for(registration, forge, tmp_path)
    reviewer.review(registration, event(head))
    (comment,) = forge.comments
    assert "⚠️ no plan" in comment["body"]
    assert "conflicts in: claims/orders.yaml" in comment["body"]
    assert "**Fix:** rebase the branch" in comment["body"]
    assert forge.statuses[-1][1]["state"] == State.ERROR.value
    assert forge.statuses[-1][1]["description"].startswith("no plan: merging")


def test_a_forge_failure_keeps_the_request_for_a_retry_unless_a_newer_one_came(
    tmp_path: Path,
) -> None:
    remote = Remote(tmp_path)
    remote.commit("main", {"claims/orders.yaml": instance("postgresql-single-small")})
    head = remote.commit("feature", {"claims/orders.yaml": instance("postgresql-single-big")}, 7)
    forge = Forge()
    forge.down = True
    registration = connection(spec("team-a", f"file://{remote.bare}"))
    reviewer = reviewer_for(registration, forge, tmp_path)
    reviewer._pending[("team-a", 7)] = event(head)
    with pytest.raises(KlutchError, match="502"):
        reviewer.handle(("team-a", 7))
    assert reviewer._pending[("team-a", 7)] == event(head)
    forge.down = False
    reviewer.handle(("team-a", 7))
    assert ("team-a", 7) not in reviewer._pending
    assert forge.statuses[-1][1]["state"] == "success"


def test_error_comments_quote_every_line_of_the_message() -> None:
    body = error_comment("r", event("a" * 40), "b" * 40, KlutchError("one\ntwo", "do this"))
    assert "> one\n> two" in body
    assert body.startswith(marker("r") + "\n")
    assert "(bbbbbbbbbbbb)" in body
