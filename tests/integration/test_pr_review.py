"""Pull-request review through a real Gitea: Gitea delivers its own pull_request webhooks to the
reconciler, which plans the pull request against the Control Plane where Crossplane offers the
catalog (so Klutch's CEL transition rules run in the dry-run) and posts one comment, edited on
every new head, and a commit status per head, through Gitea's API."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from klutch_gitops.config import GitCredentialsRef, SecretRef
from klutch_gitops.dev.localstack.stack import StackInfo
from reconciler.review.pulls import context, marker
from tests.kit.claims import POSTGRES
from tests.kit.git import git
from tests.kit.tenant import WEBHOOK_SECRET, Origin, Tenant, make_tenant
from tests.kit.wait import eventually

from .catalogstack import TRANSITION, local_claim_crds, local_instance
from .gitea import Gitea, running_gitea

pytestmark = pytest.mark.crossplane


@pytest.fixture(scope="module")
def gitea(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gitea]:
    with running_gitea(tmp_path_factory.mktemp("gitea")) as gitea:
        yield gitea


@pytest.fixture(scope="module")
def catalog(clusters: dict[str, client.ApiClient]) -> Iterator[list[dict]]:
    with local_claim_crds(clusters) as crds:
        yield crds


@pytest.fixture(scope="module")
def tenant(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    catalog: list[dict],
    gitea: Gitea,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Tenant]:
    """A tenant whose repository is on Gitea, with a webhook to its reconciler."""
    repo = f"team-{uuid.uuid4().hex[:6]}"
    gitea.create_repo(repo)
    token = SecretRef(file=gitea.token_file)
    origin = Origin(
        url=gitea.clone_url(repo),
        person_url=gitea.push_url(repo),
        bare=gitea.bare(repo),
        credentials=GitCredentialsRef(username="klutch-admin", password=token),
        forge_token=token,
    )
    tenant = make_tenant(
        stack,
        clusters,
        tmp_path_factory.mktemp("pr-review"),
        mode="files",
        claim_crds=catalog,
        origin=origin,
    )
    gitea.add_webhook(repo, f"http://{tenant.config.listen}/webhooks/gitea", WEBHOOK_SECRET)
    yield tenant
    tenant.reconciler.stop()
    tenant.control_plane.delete(POSTGRES, tenant.mapped, "orders")


def repo_of(tenant: Tenant) -> str:
    return Path(tenant.config.repositories[0].url).stem


def push_branch(tenant: Tenant, branch: str, files: dict[str, str]) -> str:
    """Commit on the pull request's branch (from main when new) and push it."""
    git(tenant.clone, "fetch", "-q", "origin")
    exists = git(tenant.clone, "ls-remote", "--heads", "origin", branch)
    git(tenant.clone, "checkout", "-q", "-B", branch, f"origin/{branch if exists else 'main'}")
    for name, text in files.items():
        (tenant.clone / name).write_text(text)
    git(tenant.clone, "add", "-A")
    git(tenant.clone, "commit", "-q", "-m", f"{branch}: {', '.join(files)}")
    git(tenant.clone, "push", "-q", "origin", f"HEAD:refs/heads/{branch}")
    sha = git(tenant.clone, "rev-parse", "HEAD")
    git(tenant.clone, "checkout", "-q", "main")
    return sha


def test_a_pull_request_gets_one_plan_comment_and_a_status_per_head(
    tenant: Tenant, gitea: Gitea
) -> None:
    ns, repo, name = tenant.namespace, repo_of(tenant), tenant.config.repositories[0].name
    tenant.push(
        {"claims/orders.yaml": local_instance("orders", ns, "postgresql-single-small")}, "db"
    )
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "orders"),
        "orders on the Control Plane",
        timeout=60,
    )

    nano = local_instance("orders", ns, "postgresql-single-nano")
    downgrade = push_branch(tenant, "downgrade", {"claims/orders.yaml": nano})
    number = gitea.open_pull(repo, "downgrade", "main", "A smaller database")["number"]

    def ours() -> list[dict]:
        return [c for c in gitea.comments(repo, number) if c["body"].startswith(marker(name))]

    def status(sha: str) -> str | None:
        return gitea.statuses(repo, sha).get(context(name))

    eventually(lambda: status(downgrade) == "failure", "a failure status on the head", timeout=90)
    (comment,) = ours()
    assert "## klutch-gitops plan: ❌ 1 failure" in comment["body"]
    assert TRANSITION in comment["body"]
    assert f"change PostgresqlInstance.anynines.com {ns}/orders" in comment["body"]
    assert "restarts the service (spec.plan)" in comment["body"]
    live = tenant.control_plane.get(POSTGRES, tenant.mapped, "orders")
    assert live is not None
    assert live["spec"]["plan"] == "postgresql-single-small"  # a dry-run changes nothing

    labelled = push_branch(
        tenant,
        "downgrade",
        {
            "claims/orders.yaml": local_instance(
                "orders", ns, "postgresql-single-small", "  labels:\n    tier: gold\n"
            )
        },
    )
    eventually(lambda: status(labelled) == "success", "a success status on the new head", 90)
    (edited,) = ours()  # the same comment, edited: no second one
    assert edited["id"] == comment["id"]
    assert "## klutch-gitops plan: ✅ clean" in edited["body"]
    assert "metadata.labels.tier" in edited["body"]
    assert status(downgrade) == "failure"  # the old head keeps its verdict
