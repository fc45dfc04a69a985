"""`klutch-gitops plan` on the real stack: a branch of a tenant's repository is planned against
the Control Plane where Crossplane offers the catalog, so Klutch's CEL transition rules run on a
server-side dry-run against the live claims of the base, before anything is merged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, api_client
from reconciler.review.plan import Action, Outcome
from reconciler.review.plan_io import Target, run_plan
from reconciler.sync import objects
from tests.kit.claims import POSTGRES
from tests.kit.git import git
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

from .catalogstack import GROUP, TRANSITION, local_claim_crds, local_instance

pytestmark = pytest.mark.crossplane

PROTECTED = f'  annotations:\n    {objects.DELETION_PROTECTION}: "true"\n'


def service_binding(name: str, namespace: str, instance_ref: str) -> str:
    return f"""apiVersion: {GROUP}/v1
kind: ServiceBinding
metadata:
  name: {name}
  namespace: {namespace}
spec:
  instanceRef: {instance_ref}
  serviceInstanceType: postgresql
  compositionRef:
    name: local-servicebinding
"""


@pytest.fixture(scope="module")
def catalog(clusters: dict[str, client.ApiClient]) -> Iterator[list[dict]]:
    with local_claim_crds(clusters) as crds:
        yield crds


@pytest.fixture(scope="module")
def tenant(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    catalog: list[dict],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Tenant]:
    tenant = make_tenant(
        stack, clusters, tmp_path_factory.mktemp("plan"), mode="files", claim_crds=catalog
    )
    yield tenant
    tenant.reconciler.stop()
    for name in ("orders", "archive"):
        tenant.control_plane.delete(POSTGRES, tenant.mapped, name)


@pytest.fixture(scope="module")
def base(tenant: Tenant) -> str:
    """The base commit: two instances, "archive" deletion-protected in Git, both reconciled
    into the Control Plane (where their live copies are what a change is checked against)."""
    ns = tenant.namespace
    sha = tenant.push(
        {
            "claims/orders.yaml": local_instance("orders", ns, "postgresql-single-small"),
            "claims/archive.yaml": local_instance(
                "archive", ns, "postgresql-single-nano", PROTECTED
            ),
        },
        "orders and archive databases",
    )
    for name in ("orders", "archive"):
        eventually(
            lambda name=name: tenant.control_plane.get(POSTGRES, tenant.mapped, name),
            f"{name} on the Control Plane",
            timeout=60,
        )
        eventually(
            lambda name=name: tenant.app.get(POSTGRES, ns, name),
            f"{name} in the App Cluster",
            timeout=60,
        )
    return sha


def branch(tenant: Tenant, name: str, base: str, files: dict[str, str | None]) -> str:
    """A pull request's branch in the person's clone, from ``base``; not pushed."""
    git(tenant.clone, "checkout", "-q", "-b", name, base)
    for file, text in files.items():
        path = tenant.clone / file
        if text is None:
            path.unlink()
        else:
            path.write_text(text)
    git(tenant.clone, "add", "-A")
    git(tenant.clone, "commit", "-q", "-m", name)
    git(tenant.clone, "checkout", "-q", "main")
    return name


def binder(tenant: Tenant) -> Path:
    path = tenant.config.repositories[0].control_plane_kubeconfig.file
    assert path is not None
    return path


def target(tenant: Tenant, app: Kube | None = None) -> Target:
    return Target(
        name=tenant.config.repositories[0].name,
        path="claims",
        consumer_namespace=tenant.consumer,
        app_namespaces=frozenset({tenant.namespace}),
        control_plane=Kube(api_client(binder(tenant))),
        app=app,
    )


def plan_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "klutch_gitops.cli", "plan", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_a_plan_downgrade_is_refused_by_the_control_plane_before_merge(
    tenant: Tenant, base: str
) -> None:
    head = branch(
        tenant,
        "downgrade",
        base,
        {
            "claims/orders.yaml": local_instance(
                "orders", tenant.namespace, "postgresql-single-nano"
            )
        },
    )
    result = plan_cli(
        "--repo",
        str(tenant.clone),
        "--base",
        base,
        "--head",
        head,
        "--path",
        "claims",
        "--control-plane-kubeconfig",
        str(binder(tenant)),
        "--consumer-namespace",
        tenant.consumer,
    )
    assert result.returncode == 1, result.stderr
    comment = result.stdout
    assert comment.startswith("## klutch-gitops plan: ❌ 1 failure\n")
    failures = comment[comment.index("### ❌ Failures") : comment.index("### `claims`")]
    assert f"change PostgresqlInstance.anynines.com {tenant.namespace}/orders" in failures
    assert TRANSITION in failures
    assert "restarts the service (spec.plan)" in comment
    live = tenant.control_plane.get(POSTGRES, tenant.mapped, "orders")
    assert live is not None
    assert live["spec"]["plan"] == "postgresql-single-small"  # a dry-run changes nothing


def test_a_binding_and_a_label_make_a_clean_plan(
    tenant: Tenant, base: str, stack: StackInfo, tmp_path: Path
) -> None:
    """Through the reconciler's own config: the registration that follows the clone's remote."""
    ns = tenant.namespace
    head = branch(
        tenant,
        "binding",
        base,
        {
            "claims/orders.yaml": local_instance(
                "orders", ns, "postgresql-single-small", "  labels:\n    tier: gold\n"
            ),
            "claims/orders-app.yaml": service_binding("orders-app", ns, "orders"),
        },
    )
    spec = tenant.config.repositories[0]
    config = tmp_path / "reconciler.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "controlPlane": {"kubeconfig": stack.clusters["control-plane"].kubeconfig},
                "repositories": [
                    {
                        "name": spec.name,
                        "url": spec.url,
                        "path": spec.path,
                        "consumerNamespace": spec.consumer_namespace,
                        "appNamespaces": list(spec.app_namespaces),
                        "appCluster": {"kubeconfig": stack.clusters["app"].kubeconfig},
                        "controlPlane": {"kubeconfig": str(binder(tenant))},
                    }
                ],
            }
        )
    )
    result = plan_cli(
        "--repo", str(tenant.clone), "--base", base, "--head", head, "-c", str(config), "-o", "json"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads(result.stdout)
    assert plan["result"] == "clean"
    assert plan["counts"] == {
        "create": 1,
        "change": 1,
        "delete": 0,
        "destructive": 0,
        "failures": 0,
    }
    (binding,) = plan["bindings"]
    assert binding["name"] == spec.name
    created, changed = binding["changes"]
    assert (created["action"], created["kind"], created["name"]) == (
        "create",
        "ServiceBinding",
        "orders-app",
    )
    assert (changed["action"], changed["name"]) == ("change", "orders")
    assert changed["fields"] == [{"path": "metadata.labels.tier", "op": "add", "new": "gold"}]
    for change in (created, changed):
        assert change["checks"] == [{"name": "dry-run", "outcome": "passed"}]


def test_deleting_an_instance_is_listed_first_as_destructive(tenant: Tenant, base: str) -> None:
    ns = tenant.namespace
    head = branch(
        tenant,
        "cleanup",
        base,
        {
            "claims/orders.yaml": None,
            "claims/archive.yaml": local_instance(
                "archive", ns, "postgresql-single-small", PROTECTED
            ),
            "claims/archive-app.yaml": service_binding("archive-app", ns, "archive"),
        },
    )
    plan = run_plan(tenant.clone, base, head, [target(tenant)])
    changes = plan.bindings[0].changes
    assert [(c.action, c.identity.name) for c in changes] == [
        (Action.DELETE, "orders"),
        (Action.CHANGE, "archive"),
        (Action.CREATE, "archive-app"),
    ]
    assert changes[0].destructive == "deletes the data service and its data"
    assert changes[1].destructive == "restarts the service (spec.plan)"
    assert changes[2].destructive is None
    assert [c.outcome for c in changes[0].checks] == [Outcome.PASSED]
    assert plan.exit_code == 0


def test_deleting_a_deletion_protected_instance_fails_the_plan(tenant: Tenant, base: str) -> None:
    head = branch(tenant, "drop-archive", base, {"claims/archive.yaml": None})
    plan = run_plan(tenant.clone, base, head, [target(tenant)])
    assert plan.exit_code == 1
    (failure,) = plan.failures()
    assert failure.subject.startswith("delete PostgresqlInstance.anynines.com")
    assert "deletion-protected" in failure.message
    assert "in Git" in failure.message


def test_deletion_protection_set_on_the_live_app_claim_fails_the_plan(
    tenant: Tenant, base: str
) -> None:
    """`kubectl annotate` on the App claim protects it as well as Git does."""
    ns = tenant.namespace
    head = branch(tenant, "drop-orders", base, {"claims/orders.yaml": None})
    annotations = {"metadata": {"annotations": {objects.DELETION_PROTECTION: "true"}}}
    tenant.app.patch(POSTGRES, ns, "orders", annotations)
    try:
        plan = run_plan(tenant.clone, base, head, [target(tenant, app=tenant.app)])
    finally:
        removed = {"metadata": {"annotations": {objects.DELETION_PROTECTION: None}}}
        tenant.app.patch(POSTGRES, ns, "orders", removed)
    assert plan.exit_code == 1
    (failure,) = plan.failures()
    assert "on the live App claim" in failure.message
    assert run_plan(tenant.clone, base, head, [target(tenant, app=tenant.app)]).exit_code == 0
