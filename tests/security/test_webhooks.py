"""Hostile webhooks against a real reconciler that follows two tenants' repositories on a real
Gitea (both registered from the config file, each with its own webhook secret and forge token),
and what its HTTP port tells a stranger.

The attacker holds tenant A's webhook secret (A is the attacker's own repository) and tries to
reach tenant B: a push naming B's URL too, a pull request naming B's URL with an API URL of the
attacker's (a loopback server on another port, the same host as Gitea, so a hostname check alone
would pass it), a body nested 200,000 levels deep, a replayed delivery. The payloads are Gitea's
documented ones (docs.gitea.com/usage/webhooks: ``X-Gitea-Event``, ``X-Gitea-Delivery``,
``X-Gitea-Signature`` = hex HMAC-SHA256 of the body; ``repository.clone_url``/``ssh_url``/
``html_url``/``url``), trimmed to the fields the reconciler reads.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import httpx
import pytest
from kubernetes import client

from klutch_gitops.config import GitCredentialsRef, RegistrationSpec, SecretRef
from klutch_gitops.dev.localstack.stack import StackInfo
from reconciler import metrics
from reconciler.manager import Reconciler
from reconciler.review.pulls import context, marker
from tests.integration.gitea import Gitea, running_gitea
from tests.kit.git import git
from tests.kit.tenant import Origin, Tenant, make_tenant
from tests.kit.wait import eventually
from tests.security.listener import Listener, listening

A_SECRET = b"tenant-a-webhook-secret"
B_SECRET = b"tenant-b-webhook-secret"
METRICS_TOKEN = "metrics-token-for-the-platform-team"
QUIET = 3.0  # seconds in which a wrongly triggered fetch or post would have happened


def attacker_api(listener: Listener) -> str:
    """A forge API URL on the attacker's listener: same host as Gitea, another port and path."""
    return f"http://127.0.0.1:{listener.port}/steal/api/v1/repos/klutch-admin/victim"


@pytest.fixture
def attacker() -> Iterator[Listener]:
    with listening() as listener:
        yield listener


@dataclass
class Pair:
    a: Tenant
    b: Tenant
    a_repo: str
    b_repo: str
    reconciler: Reconciler
    gitea: Gitea

    @property
    def url(self) -> str:
        return f"http://{self.reconciler.config.listen}"

    def spec(self, tenant: Tenant) -> RegistrationSpec:
        return next(
            s
            for s in self.reconciler.config.repositories
            if s.consumer_namespace == tenant.consumer
        )

    def head(self, tenant: Tenant) -> str | None:
        return self.reconciler.syncs[self.spec(tenant).name].head

    def fetches(self, tenant: Tenant) -> float:
        return (
            metrics.REGISTRY.get_sample_value(
                "klutch_gitops_fetch_duration_seconds_count", {"repository": self.spec(tenant).name}
            )
            or 0.0
        )


@pytest.fixture(scope="module")
def gitea(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gitea]:
    with running_gitea(tmp_path_factory.mktemp("gitea")) as gitea:
        yield gitea


@pytest.fixture(scope="module")
def pair(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    gitea: Gitea,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Pair]:
    """Tenants A and B on Gitea, one reconciler following both with their own webhook secrets
    and forge tokens, polling only once an hour: only a webhook makes it fetch."""
    tenants, repos, specs = [], [], []
    for who, secret in (("a", A_SECRET), ("b", B_SECRET)):
        repo = f"{who}-{uuid.uuid4().hex[:6]}"
        gitea.create_repo(repo)
        token = SecretRef(file=gitea.token_file)
        origin = Origin(
            url=gitea.clone_url(repo),
            person_url=gitea.push_url(repo),
            bare=gitea.bare(repo),
            credentials=GitCredentialsRef(username="klutch-admin", password=token),
            forge_token=token,
        )
        directory = tmp_path_factory.mktemp(f"webhooks-{who}")
        tenant = make_tenant(stack, clusters, directory, origin=origin, start=False)
        secret_file = directory / "own-webhook-secret"
        secret_file.write_bytes(secret)
        tenants.append(tenant)
        repos.append(repo)
        specs.append(
            replace(tenant.config.repositories[0], webhook_secret=SecretRef(file=secret_file))
        )
    token_file = tmp_path_factory.mktemp("metrics") / "token"
    token_file.write_text(METRICS_TOKEN + "\n")
    config = replace(
        tenants[0].config,
        repositories=tuple(specs),
        poll_interval=3600.0,
        metrics_token=SecretRef(file=token_file),
    )
    reconciler = Reconciler(config).start()
    found = Pair(tenants[0], tenants[1], repos[0], repos[1], reconciler, gitea)
    eventually(
        lambda: (
            all(s.name in reconciler.syncs for s in specs)
            and found.head(found.a) is not None
            and found.head(found.b) is not None
        ),
        "both registrations synced",
        timeout=60,
    )
    for spec in specs:  # each first poll's fetch is over, so only a push can fetch again
        sync = reconciler.syncs[spec.name]
        eventually(
            lambda name=spec.name: reconciler.registrations.poller.answered(name),
            f"{spec.name}'s first poll",
        )
        eventually(lambda sync=sync: not sync.needs_fetch, f"{spec.name}'s fetching pass")
        with reconciler.registrations.lock(spec.name):  # the pass in flight, if any, is over
            pass
    yield found
    reconciler.stop()


def payload(pair: Pair, signer_repo: str, other_repo: str, **extra: Any) -> dict[str, Any]:
    """A Gitea payload whose repository fields name the signer's repository and another's."""
    url = pair.gitea.url
    return {
        "repository": {
            "id": 1,
            "full_name": f"klutch-admin/{signer_repo}",
            "clone_url": pair.gitea.clone_url(signer_repo),
            "ssh_url": pair.gitea.clone_url(other_repo),
            "html_url": f"{url}/klutch-admin/{other_repo}",
            "url": f"{url}/api/v1/repos/klutch-admin/{other_repo}",
        },
        **extra,
    }


def post(
    pair: Pair, body: bytes, secret: bytes, event: str = "push", delivery: str | None = None
) -> httpx.Response:
    headers = {
        "X-Gitea-Event": event,
        "X-Gitea-Delivery": delivery or str(uuid.uuid4()),
        "X-Gitea-Signature": hmac.new(secret, body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }
    return httpx.post(f"{pair.url}/webhooks/gitea", content=body, headers=headers, timeout=30)


def push_body(pair: Pair, after: str, other_repo: str | None = None) -> bytes:
    document = payload(pair, pair.a_repo, other_repo or pair.a_repo)
    return json.dumps({"ref": "refs/heads/main", "after": after, **document}).encode()


def test_a_push_signed_with_one_tenants_secret_triggers_no_other(pair: Pair) -> None:
    b_head, b_fetches = pair.head(pair.b), pair.fetches(pair.b)
    a_fetches = pair.fetches(pair.a)
    a_new = pair.a.push({"claims/README.md": "a's change\n"})
    b_new = pair.b.push({"claims/README.md": "b's change, waiting for b's own webhook\n"})

    response = post(pair, push_body(pair, a_new, other_repo=pair.b_repo), A_SECRET)
    assert (response.status_code, response.json()) == (202, {"triggered": 1})
    eventually(lambda: pair.fetches(pair.a) > a_fetches, "A to fetch", timeout=30)
    eventually(lambda: fetched(pair, pair.a, a_new), "A's pushed commit fetched", timeout=30)
    time.sleep(QUIET)
    assert pair.head(pair.b) == b_head != b_new  # B fetched nothing…
    assert pair.fetches(pair.b) == b_fetches  # …not even once

    forged = post(pair, push_body(pair, a_new), B_SECRET)  # B's secret, A's repository only
    assert (forged.status_code, forged.json()) == (
        401,
        {
            "error": "X-Gitea-Signature matches the webhook secret of no registration of this "
            "repository"
        },
    )


def fetched(pair: Pair, tenant: Tenant, sha: str) -> bool:
    """Whether the registration's fetched head is ``sha`` or a status commit on top of it."""
    head = pair.head(tenant)
    if head is None:
        return False
    ancestor = subprocess.run(
        ["git", "merge-base", "--is-ancestor", sha, head], cwd=tenant.remote, check=False
    )
    return ancestor.returncode == 0


def push_branch(tenant: Tenant, branch: str, text: str) -> str:
    git(tenant.clone, "fetch", "-q", "origin")
    git(tenant.clone, "checkout", "-q", "-B", branch, "origin/main")
    (tenant.clone / "claims").mkdir(exist_ok=True)
    (tenant.clone / "claims" / "NOTES.md").write_text(text)
    git(tenant.clone, "add", "-A")
    git(tenant.clone, "commit", "-q", "-m", f"{branch}: notes")
    git(tenant.clone, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
    sha = git(tenant.clone, "rev-parse", "HEAD")
    git(tenant.clone, "checkout", "-q", "main")
    return sha


def test_a_pull_request_signed_by_a_reaches_neither_b_nor_the_payloads_api(
    pair: Pair, attacker: Listener
) -> None:
    a_head = push_branch(pair.a, "notes", "a's notes\n")
    b_head = push_branch(pair.b, "notes", "b's notes\n")
    a_number = pair.gitea.open_pull(pair.a_repo, "notes", "main", "notes")["number"]
    b_number = pair.gitea.open_pull(pair.b_repo, "notes", "main", "notes")["number"]
    assert a_number == b_number  # each repository's first: the payload's number names both
    document = payload(pair, pair.a_repo, pair.b_repo)
    document["repository"]["url"] = attacker_api(attacker)  # where the old reconciler posted to
    body = json.dumps(
        {
            "action": "opened",
            "number": b_number,
            "pull_request": {
                "number": b_number,
                "head": {"ref": "notes", "sha": b_head},
                "base": {"ref": "main", "sha": "0" * 40},
            },
            **document,
        }
    ).encode()

    response = post(pair, body, A_SECRET, event="pull_request")
    assert (response.status_code, response.json()) == (202, {"triggered": 1})  # A's alone
    a_name, b_name = pair.spec(pair.a).name, pair.spec(pair.b).name
    planned = ("success", "failure", "error")
    eventually(
        lambda: pair.gitea.statuses(pair.a_repo, a_head).get(context(a_name)) in planned,
        "A's plan posted on its registered forge",
        timeout=90,
    )
    comments = pair.gitea.comments(pair.a_repo, a_number)
    assert [c for c in comments if c["body"].startswith(marker(a_name))]
    time.sleep(QUIET)
    assert attacker.connections == [], "the payload's API was called"
    assert pair.gitea.comments(pair.b_repo, b_number) == []  # nothing posted for B
    assert pair.gitea.statuses(pair.b_repo, b_head) == {}
    assert context(b_name) not in pair.gitea.statuses(pair.a_repo, a_head)


def test_a_body_nested_200000_deep_is_a_400_and_triggers_nothing(pair: Pair) -> None:
    fetches = pair.fetches(pair.a), pair.fetches(pair.b)
    body = b"[" * 200_000 + b"]" * 200_000
    response = post(pair, body, A_SECRET)
    assert (response.status_code, response.json()) == (
        400,
        {"error": "payload nests deeper than 64 levels; no forge sends that"},
    )
    nested = json.dumps(payload(pair, pair.a_repo, pair.a_repo)).encode()[:-1]
    deep_field = nested + b', "x": ' + b"{" * 100_000 + b"}" * 100_000 + b"}"
    response = post(pair, deep_field, A_SECRET)
    assert response.status_code == 400
    assert "nests deeper than 64 levels" in response.json()["error"]
    assert httpx.get(f"{pair.url}/healthz", timeout=5).status_code == 200
    time.sleep(QUIET)
    assert (pair.fetches(pair.a), pair.fetches(pair.b)) == fetches


def test_bodies_made_for_quadratic_scans_are_refused_at_once(pair: Pair) -> None:
    """An unsigned megabyte of unterminated strings, and a payload URL of 100,000 characters:
    each made a regular expression scan from every position (48 KB took 5 s, a megabyte about
    40 minutes, holding the GIL: renewals, health checks and workers stalled). Now each is read
    once; the client's 30-second timeout is the bound, not a benchmark."""
    fetches = pair.fetches(pair.a), pair.fetches(pair.b)
    unterminated = b'"a\\' * 340_000
    response = post(pair, unterminated, b"no secret of anyone's")
    assert response.status_code == 400
    assert response.json()["error"].startswith("payload is not JSON")
    document = payload(pair, pair.a_repo, pair.a_repo)
    document["repository"]["clone_url"] = "a" * 100_000
    response = post(pair, json.dumps({"ref": "refs/heads/main", **document}).encode(), A_SECRET)
    assert response.status_code == 400
    assert "longer than 2048 characters" in response.json()["error"]
    assert len(response.text) < 1000  # the URL is not echoed back
    assert httpx.get(f"{pair.url}/healthz", timeout=5).status_code == 200
    assert (pair.fetches(pair.a), pair.fetches(pair.b)) == fetches


def test_a_replayed_delivery_triggers_nothing(pair: Pair) -> None:
    a_new = pair.a.push({"claims/README.md": f"replayed {uuid.uuid4()}\n"})
    body, delivery = push_body(pair, a_new), str(uuid.uuid4())
    fetches = pair.fetches(pair.a)
    first = post(pair, body, A_SECRET, delivery=delivery)
    assert (first.status_code, first.json()) == (202, {"triggered": 1})
    eventually(lambda: pair.fetches(pair.a) == fetches + 1, "A to fetch once", timeout=30)
    fetches += 1

    ignored = {"ignored": "this delivery was received already; a replay triggers nothing"}
    for again in (delivery, str(uuid.uuid4())):  # the same id, and the body under a new id
        replay = post(pair, body, A_SECRET, delivery=again)
        assert (replay.status_code, replay.json()) == (200, ignored)
    time.sleep(QUIET)
    assert pair.fetches(pair.a) == fetches


def test_readyz_and_metrics_name_no_tenant_without_the_token(pair: Pair) -> None:
    names = [
        *(pair.spec(t).name for t in (pair.a, pair.b)),
        *(t.consumer for t in (pair.a, pair.b)),
        *(t.namespace for t in (pair.a, pair.b)),
    ]
    ready = httpx.get(f"{pair.url}/readyz", timeout=5)
    assert set(ready.json()) == {"ready", "waiting"}
    exposed = httpx.get(f"{pair.url}/metrics", timeout=5).text
    assert "klutch_gitops_fetch_duration_seconds_count" in exposed
    for name in names:
        assert name not in ready.text
        assert name not in exposed
    assert f'repository="{metrics.label_hash(pair.spec(pair.a).name)}"' in exposed

    bearer = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    named = httpx.get(f"{pair.url}/metrics", headers=bearer, timeout=5).text
    assert f'repository="{pair.spec(pair.a).name}"' in named
    assert "reasons" in httpx.get(f"{pair.url}/readyz", headers=bearer, timeout=5).json()
    wrong = httpx.get(f"{pair.url}/metrics", headers={"Authorization": "Bearer guess"}, timeout=5)
    assert wrong.status_code == 401
    assert "metricsToken" in wrong.json()["error"]
    assert all(name not in wrong.text for name in names)
