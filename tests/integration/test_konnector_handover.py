"""The README's migration from Klutch's konnector to Git, run: no data service is recreated.

A claim made with kubectl and mirrored by the konnector's rules (``Konnector`` in
test_konnector.py, which cites anynines/klutchio ``bind/pkg/konnector/.../spec/spec_reconcile.go``
and ``.../status/status_reconcile.go``) is then written into Git unchanged, as the README's
"From Klutch (konnector + kubectl bind)" steps 1 to 3 say. The reconciler takes over the App
object and the Control Plane claim the konnector made: both keep their uid, there is still one
Control Plane claim, status keeps flowing, and the konnector still running beside it has nothing
left to change.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import FIELD_MANAGER, Kube, KubeError, api_client
from klutch_gitops.kube.crds import install_crds, load_crds
from reconciler.sync.objects import REPOSITORY_LABEL
from tests.kit.claims import POSTGRES, claim
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

from .test_konnector import API, API_SERVICE_BINDINGS, KLUTCH_BIND, Konnector, provide
from .test_konnector import app_binding as app_binding  # a fixture


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    """A bound consumer, and the App Cluster's APIServiceBinding CRD, as test_konnector's."""
    install_crds(clusters["app"], load_crds(cluster="app"))
    world = make_tenant(stack, clusters, tmp_path)
    yield world
    world.reconciler.stop()


def served(app: Kube) -> bool:
    try:
        app.list(POSTGRES, None)
    except KubeError as error:
        if error.status == 404:
            return False
        raise
    return True


def kubectl_apply(stack: StackInfo, manifest: str) -> None:
    """The real kubectl's client-side apply: its fields belong to ``kubectl-client-side-apply``."""
    program = binaries.require("kubectl")["kubectl"]
    subprocess.run(
        [str(program), "--kubeconfig", stack.clusters["app"].kubeconfig, "apply", "-f", "-"],
        input=manifest,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )


def test_a_konnector_claim_moved_to_git_keeps_its_control_plane_claim(
    stack: StackInfo, tenant: Tenant, app_binding: str, tmp_path: Path
) -> None:
    konnector = Konnector(
        tenant.app, Kube(api_client(tmp_path / "binder.kubeconfig")), tenant.consumer
    )
    # Before: the claim was made with kubectl, and the konnector made its Control Plane copy.
    eventually(lambda: served(tenant.app), "the App Cluster to serve the exported kind")
    kubectl_apply(stack, claim("legacy", tenant.namespace))

    def konnector_pass() -> None:
        for obj in tenant.app.list(POSTGRES, tenant.namespace)[0]:
            konnector.sync_spec(POSTGRES, obj)
            konnector.sync_status(POSTGRES, tenant.namespace, obj["metadata"]["name"])

    made = eventually(
        lambda: konnector_pass() or tenant.control_plane.get(POSTGRES, tenant.mapped, "legacy"),
        "the konnector's Control Plane copy",
        timeout=60,
    )
    provide(tenant, tenant.mapped, "legacy")
    eventually(
        lambda: (
            konnector_pass()
            or (tenant.app.get(POSTGRES, tenant.namespace, "legacy") or {}).get("status")
        ),
        "the konnector's status on the App claim",
    )
    app_uid = tenant.app.get(POSTGRES, tenant.namespace, "legacy")["metadata"]["uid"]
    # A konnector serves only kinds `kubectl bind` made an APIServiceBinding for (its
    # controllers start per binding: bind/pkg/konnector/konnector_controller.go); the binding's
    # kubeconfig Secret is left out here (the konnector below is a replay with its own client),
    # so the reconciler cannot tell its consumer namespace and only knows that one serves the kind.
    tenant.app.create(
        API_SERVICE_BINDINGS,
        {
            "apiVersion": API_SERVICE_BINDINGS.api_version,
            "kind": API_SERVICE_BINDINGS.kind,
            "metadata": {"name": API},
            "spec": {
                "kubeconfigSecretRef": {
                    "namespace": KLUTCH_BIND,
                    "name": app_binding,
                    "key": "kubeconfig",
                }
            },
        },
    )

    # Steps 1-3: the same consumer namespace, the claim written into Git as it is, pushed.
    tenant.push({"claims/legacy.yaml": claim("legacy", tenant.namespace)})

    def taken_over() -> bool:
        konnector_pass()  # the konnector keeps running until step 4
        meta = (tenant.app.get(POSTGRES, tenant.namespace, "legacy") or {}).get("metadata", {})
        return bool((meta.get("labels") or {}).get(REPOSITORY_LABEL))

    eventually(taken_over, "the reconciler to take the App claim over from Git", timeout=60)
    # An equal spec needs no apply: the Control Plane claim is left exactly as the konnector made
    # it. The next change in Git is applied to that same claim.
    tenant.push(
        {"claims/legacy.yaml": claim("legacy", tenant.namespace, "postgresql-single-small")}
    )

    def changed() -> dict | None:
        konnector_pass()
        upstream = tenant.control_plane.get(POSTGRES, tenant.mapped, "legacy") or {}
        managers = {m.get("manager") for m in upstream["metadata"].get("managedFields") or []}
        return (
            upstream
            if upstream["spec"]["plan"] == "postgresql-single-small" and FIELD_MANAGER in managers
            else None
        )

    upstream = eventually(changed, "the change in Git on the Control Plane claim", timeout=60)

    # Nothing recreated: the same App object and the same Control Plane claim (and database).
    assert upstream["metadata"]["uid"] == made["metadata"]["uid"]
    assert tenant.app.get(POSTGRES, tenant.namespace, "legacy")["metadata"]["uid"] == app_uid
    assert [
        o["metadata"]["name"] for o in tenant.control_plane.list(POSTGRES, tenant.mapped)[0]
    ] == ["legacy"]
    conditions = tenant.app.get(POSTGRES, tenant.namespace, "legacy")["status"]["conditions"]
    assert conditions[0]["status"] == "True"

    # The konnector still running has nothing left to change: no resourceVersion moves.
    def versions() -> tuple[str, str]:
        return (
            tenant.app.get(POSTGRES, tenant.namespace, "legacy")["metadata"]["resourceVersion"],
            tenant.control_plane.get(POSTGRES, tenant.mapped, "legacy")["metadata"][
                "resourceVersion"
            ],
        )

    def quiet() -> bool:
        first = versions()
        for _ in range(4):
            konnector_pass()
            time.sleep(0.5)
        return versions() == first

    eventually(quiet, "the two tools to settle", timeout=30)
    before = versions()
    for _ in range(20):
        konnector_pass()
        time.sleep(0.5)
    assert versions() == before
