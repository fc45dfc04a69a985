"""The reconciler end to end: real clusters, real git, a running reconciler per test."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from klutch_gitops.kube.client import KubeError
from klutch_gitops.kube.resources import EVENTS, SECRETS
from reconciler.sync import objects
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.tenant import WEBHOOK_SECRET, Tenant, make_tenant, report_ready
from tests.kit.wait import eventually


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path)
    yield world
    world.reconciler.stop()


def test_claim_reaches_both_clusters_and_status_comes_back_to_git(tenant: Tenant) -> None:
    text = claim("orders", tenant.namespace)
    tenant.push({"claims/orders.yaml": text})

    app_copy = eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "orders"), "the App Cluster copy"
    )
    assert (
        app_copy["metadata"]["labels"][objects.REPOSITORY_LABEL]
        == tenant.config.repositories[0].name
    )
    assert objects.FINALIZER in app_copy["metadata"]["finalizers"]
    assert app_copy["metadata"]["annotations"][objects.FILE_ANNOTATION] == "claims/orders.yaml"
    upstream = eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "orders"),
        "the Control Plane copy in the mapped namespace",
    )
    assert upstream["spec"]["plan"] == "postgresql-single-nano"
    assert upstream["metadata"]["annotations"][objects.BOUND_ANNOTATION] == "true"
    assert not any(k.startswith(objects.PREFIX) for k in upstream["metadata"]["annotations"])
    assert len(tenant.control_plane.list(POSTGRES, tenant.mapped)[0]) == 1

    # The provider reports Ready on the Control Plane: App status, then a status commit.
    report_ready(tenant, "orders")
    eventually(
        lambda: (
            (tenant.app.get(POSTGRES, tenant.namespace, "orders") or {})
            .get("status", {})
            .get("host")
            == "db.example"
        ),
        "status in the App Cluster",
    )

    def committed() -> str | None:
        content = tenant.remote_file("claims/orders.yaml")
        return content if "status:" in content else None

    written = eventually(committed, "the status commit")
    # inline write-back: everything but the status block is byte-identical
    assert written.startswith(text.rstrip("\n"))
    assert yaml.safe_load(written)["status"]["conditions"][0]["status"] == "True"
    head = tenant.log()[0]
    assert "klutch-gitops[bot]" in head
    message = git(tenant.remote, "log", "-1", "--format=%B", "main")
    assert "Klutch-Source-Commit:" in message
    reports = yaml.safe_load(tenant.remote_file("claims/.klutch/reconcile.yaml"))
    report = reports["registrations"][tenant.spec.name]  # one entry per registration
    assert report["counts"]["claims"] == 1
    assert report["rejections"] == []

    # The status commit is not a change to the claim: no second write to the clusters.
    before = tenant.app.get(POSTGRES, tenant.namespace, "orders")["metadata"]["resourceVersion"]
    tenant.reconciler.syncs[tenant.config.repositories[0].name].trigger_fetch()
    eventually(
        lambda: (
            tenant.reconciler.syncs[tenant.config.repositories[0].name].head
            == git(tenant.remote, "rev-parse", "main")
        ),
        "the reconciler to see its own commit",
    )
    after = tenant.app.get(POSTGRES, tenant.namespace, "orders")["metadata"]["resourceVersion"]
    assert before == after
    commits = len(tenant.log())
    tenant.reconciler.queue.add(("writeback", tenant.config.repositories[0].name))
    assert len(tenant.log()) == commits  # nothing changed, nothing committed


def test_spec_change_drift_and_upstream_deletion(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")

    tenant.push({"claims/db.yaml": claim("db", tenant.namespace, plan="postgresql-single-small")})
    eventually(
        lambda: (
            tenant.control_plane.get(POSTGRES, tenant.mapped, "db")["spec"]["plan"]
            == "postgresql-single-small"
        ),
        "the spec change upstream",
    )

    # drift on the Control Plane by someone else is reverted
    tenant.control_plane.patch(
        POSTGRES, tenant.mapped, "db", {"spec": {"plan": "postgresql-single-big"}}
    )
    eventually(
        lambda: (
            tenant.control_plane.get(POSTGRES, tenant.mapped, "db")["spec"]["plan"]
            == "postgresql-single-small"
        ),
        "the drift to be reverted",
    )

    # an upstream deletion is recreated
    uid = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")["metadata"]["uid"]
    tenant.control_plane.delete(POSTGRES, tenant.mapped, "db")
    eventually(
        lambda: (
            (tenant.control_plane.get(POSTGRES, tenant.mapped, "db") or {})
            .get("metadata", {})
            .get("uid")
            not in (None, uid)
        ),
        "the copy to be recreated",
    )


def test_provider_secrets_flow_down_and_edits_are_reverted(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "db-conn", "namespace": tenant.mapped},
        "data": {"password": base64.b64encode(b"first").decode()},
    }
    tenant.control_plane.apply(SECRETS, secret, field_manager="provider", force=True)

    def password() -> str | None:
        copy = tenant.app.get(SECRETS, tenant.namespace, "db-conn")
        return base64.b64decode(copy["data"]["password"]).decode() if copy else None

    eventually(lambda: password() == "first", "the credentials in the App Cluster")
    copy = tenant.app.get(SECRETS, tenant.namespace, "db-conn")
    assert copy["metadata"]["annotations"][objects.RESOURCE_OWNER] == "Provider"

    tenant.app.patch(
        SECRETS,
        tenant.namespace,
        "db-conn",
        {"data": {"password": base64.b64encode(b"tampered").decode()}},
    )
    eventually(lambda: password() == "first", "the App-side edit to be reverted")

    secret["data"]["password"] = base64.b64encode(b"rotated").decode()
    tenant.control_plane.apply(SECRETS, secret, field_manager="provider", force=True)
    eventually(lambda: password() == "rotated", "the rotation downstream")

    tenant.control_plane.delete(SECRETS, tenant.mapped, "db-conn")
    eventually(
        lambda: tenant.app.get(SECRETS, tenant.namespace, "db-conn") is None,
        "the deletion downstream",
    )
    assert "password" not in git(tenant.remote, "log", "-p", "main")  # never into Git


def test_removed_claim_holds_its_finalizer_until_upstream_is_gone(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    # the provider takes its time deprovisioning
    tenant.control_plane.patch(
        POSTGRES,
        tenant.mapped,
        "db",
        {"metadata": {"finalizers": ["provider.example/deprovision"]}},
    )

    tenant.push({"claims/db.yaml": None}, "drop the database")
    eventually(
        lambda: (
            (tenant.app.get(POSTGRES, tenant.namespace, "db") or {})
            .get("metadata", {})
            .get("deletionTimestamp")
        ),
        "the App copy to be deleting",
    )
    eventually(
        lambda: (
            (tenant.control_plane.get(POSTGRES, tenant.mapped, "db") or {})
            .get("metadata", {})
            .get("deletionTimestamp")
        ),
        "the CP copy to be deleting",
    )
    app_copy = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert app_copy is not None
    assert objects.FINALIZER in app_copy["metadata"]["finalizers"]

    tenant.control_plane.patch(POSTGRES, tenant.mapped, "db", {"metadata": {"finalizers": None}})
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is None, "the CP copy to go"
    )
    eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "db") is None,
        "the App copy to go after it",
    )


def test_deletion_protection_refuses_and_reports(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    eventually(lambda: tenant.app.get(POSTGRES, tenant.namespace, "db"), "the App copy")
    # the Control Plane copy may follow a pass later (the namespace mapping); without it the
    # claim leaves Git before it was ever there
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    tenant.app.patch(
        POSTGRES,
        tenant.namespace,
        "db",
        {"metadata": {"annotations": {objects.DELETION_PROTECTION: "true"}}},
    )
    tenant.push({"claims/db.yaml": None}, "try to drop a protected database")

    def reported() -> dict | None:
        try:
            text = tenant.remote_file("claims/.klutch/reconcile.yaml")
            report = yaml.safe_load(text)["registrations"][tenant.spec.name]
        except Exception:
            return None
        return next((r for r in report["rejections"] if "deletion-protected" in r["message"]), None)

    rejection = eventually(reported, "the refusal in reconcile.yaml")
    assert "deletion-protection" in rejection["fix"]
    live = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert live is not None
    assert not live["metadata"].get("deletionTimestamp")
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is not None
    events, _ = tenant.app.list(EVENTS, tenant.namespace)
    assert any(e["reason"] == "DeletionRefused" for e in events)


def test_webhook_signatures_are_checked(tenant: Tenant) -> None:
    body = json.dumps(
        {
            "ref": "refs/heads/main",
            "after": "0" * 39 + "1",
            "repository": {
                "clone_url": f"file://{tenant.remote}",
                "ssh_url": f"file://{tenant.remote}",
                "html_url": f"file://{tenant.remote}",
            },
        }
    ).encode()
    url = f"http://{tenant.config.listen}/webhooks/gitea"
    headers = {"X-Gitea-Event": "push", "Content-Type": "application/json"}
    eventually(lambda: _answers(f"http://{tenant.config.listen}/healthz"), "the HTTP server")
    eventually(lambda: _answers(f"http://{tenant.config.listen}/readyz"), "readiness")
    # Readiness never waits for a tenant's registration (registrations.waiting), and a push for a
    # repository not registered yet has no webhook secret to verify against: a 404.
    name = tenant.config.repositories[0].name
    eventually(lambda: name in tenant.reconciler.syncs, "the registration")

    forged = httpx.post(url, content=body, headers={**headers, "X-Gitea-Signature": "00" * 32})
    assert forged.status_code == 401
    signature = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    accepted = httpx.post(url, content=body, headers={**headers, "X-Gitea-Signature": signature})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json() == {"triggered": 1}

    metrics = httpx.get(f"http://{tenant.config.listen}/metrics").text
    assert "klutch_gitops_reconcile_duration_seconds" in metrics


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def test_a_human_push_racing_a_status_commit_keeps_both(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    report_ready(tenant, "db")
    human = tenant.push({"docs/notes.md": "racing the bot\n"}, "human: notes")

    eventually(lambda: "status:" in tenant.remote_file("claims/db.yaml"), "the status commit")
    history = git(tenant.remote, "rev-list", "main").splitlines()
    assert human in history
    assert tenant.remote_file("docs/notes.md") == "racing the bot"
    try:
        git(tenant.remote, "merge-base", "--is-ancestor", human, "main")
    except Exception as error:  # pragma: no cover - the assertion message is the point
        raise AssertionError("the human commit is not in main's history") from error


def test_conflicting_field_manager_is_reported_not_forced(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    eventually(lambda: tenant.app.get(POSTGRES, tenant.namespace, "db"), "the App copy")
    # another tool takes the plan field (as a person with kubectl --force-conflicts would)
    tenant.app.apply(
        POSTGRES,
        {
            "apiVersion": "anynines.com/v1",
            "kind": "PostgresqlInstance",
            "metadata": {"name": "db", "namespace": tenant.namespace},
            "spec": {"plan": "postgresql-single-medium"},
        },
        field_manager="someone-else",
        force=True,
    )
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace, plan="postgresql-single-big")})

    def reported() -> dict | None:
        try:
            text = tenant.remote_file("claims/.klutch/reconcile.yaml")
            report = yaml.safe_load(text)["registrations"][tenant.spec.name]
        except Exception:
            return None
        return next((r for r in report["rejections"] if "conflict" in r["message"].lower()), None)

    eventually(reported, "the conflict in reconcile.yaml")
    live = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert live["spec"]["plan"] == "postgresql-single-medium"  # not forced
    with pytest.raises(KubeError):
        tenant.app.apply(
            POSTGRES,
            {
                "apiVersion": "anynines.com/v1",
                "kind": "PostgresqlInstance",
                "metadata": {"name": "db", "namespace": tenant.namespace},
                "spec": {"plan": "postgresql-single-big"},
            },
        )


def test_a_broken_document_never_deletes_its_live_claim(tenant: Tenant) -> None:
    tenant.push(
        {
            "claims/a.yaml": claim("typo", tenant.namespace),
            "claims/b.yaml": claim("unparsable", tenant.namespace),
        }
    )
    for name in ("typo", "unparsable"):
        eventually(
            lambda name=name: tenant.control_plane.get(POSTGRES, tenant.mapped, name),
            f"{name} upstream",
        )
    tenant.control_plane.apply(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "typo-conn", "namespace": tenant.mapped},
            "data": {"password": base64.b64encode(b"pw").decode()},
        },
        field_manager="provider",
        force=True,
    )
    eventually(lambda: tenant.app.get(SECRETS, tenant.namespace, "typo-conn"), "credentials")
    tenant.push(
        {
            "claims/a.yaml": claim("typo", tenant.namespace, plan="postgresql-jumbo"),
            "claims/b.yaml": claim("unparsable", tenant.namespace) + "  : [\n",
        },
        "oops: a bad plan and a broken file",
    )

    def reported() -> bool:
        try:
            text = tenant.remote_file("claims/.klutch/reconcile.yaml")
            report = yaml.safe_load(text)["registrations"][tenant.spec.name]
        except Exception:
            return False
        return {r["file"] for r in report["rejections"]} == {"claims/a.yaml", "claims/b.yaml"}

    eventually(reported, "both rejections reported")
    for name in ("typo", "unparsable"):
        live = tenant.app.get(POSTGRES, tenant.namespace, name)
        assert live is not None
        assert not live["metadata"].get("deletionTimestamp"), name
        assert tenant.control_plane.get(POSTGRES, tenant.mapped, name) is not None
    assert tenant.app.get(SECRETS, tenant.namespace, "typo-conn") is not None  # nor credentials
