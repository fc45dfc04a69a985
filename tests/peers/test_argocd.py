"""``appSync: external`` with the real Argo CD v3.3.7 (application-controller and repo-server,
tests/peers/argocd.py): Argo CD syncs a tenant's path from the test Git server into the App
Cluster with server-side apply, the reconciler adopts and mirrors what it applied, and Argo CD
judges the claims with our Lua (catalog/health/argocd). Both tracking methods Argo CD offers for
what it applied (util/argo/resource_tracking.go SetAppInstance: ``annotation``, v3's default,
writes ``argocd.argoproj.io/tracking-id``; ``label`` writes ``app.kubernetes.io/instance``)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import EVENTS
from reconciler.sync import objects
from tests.kit.claims import POSTGRES, claim
from tests.kit.tenant import Tenant, make_tenant, report_ready
from tests.kit.wait import TimedOut, eventually

from .argocd import ArgoPeer

pytestmark = [pytest.mark.integration, pytest.mark.peers]

WINDOW = 45.0  # seconds without churn, with a hard refresh (a Git read and compare) inside
BOOKKEEPING = ("argocd.argoproj.io/", "kubectl.kubernetes.io/", objects.ARGOCD_INSTANCE_LABEL)
TOOLS = {"argocd-controller", "klutch-gitops"}  # the only field managers of an App object


@pytest.fixture
def tenant(
    stack: StackInfo, clusters: dict[str, client.ApiClient], tmp_path: Path
) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path, mode="files", app_sync="external")
    yield world
    world.reconciler.stop()
    for name in ("db", "guarded"):  # what the scenario left held
        if world.app.get(POSTGRES, world.namespace, name):
            patch = {"metadata": {"finalizers": None}}
            world.app.patch(POSTGRES, world.namespace, name, patch)


def protected(name: str, namespace: str) -> str:
    return claim(name, namespace).replace(
        "  namespace:",
        f'  annotations:\n    {objects.DELETION_PROTECTION}: "true"\n  namespace:',
        1,
    )


@pytest.mark.parametrize("tracking", ["annotation", "label"])
def test_argo_cd_syncs_and_the_reconciler_mirrors_holds_and_reports(
    argocd: ArgoPeer, tenant: Tenant, tracking: str
) -> None:
    """apply -> adopted -> Control Plane copy -> status back -> status commit; Healthy from our
    Lua once Ready; a quiet window; prune held until the Control Plane copy is gone; a
    protected claim held and reported."""
    tenant.push(
        {
            "claims/db.yaml": claim("db", tenant.namespace),
            "claims/guarded.yaml": protected("guarded", tenant.namespace),
        }
    )
    app = f"{tenant.namespace}-{tracking}"
    waited = argocd.await_schema(POSTGRES.group, POSTGRES.version, POSTGRES.kind)
    print(f"[{tracking}] the claim kind in the App Cluster's OpenAPI after {waited:.1f} s")
    argocd.application(
        app, argocd.serve(tenant.remote), "claims", tenant.namespace, tracking=tracking,
        self_heal=True, allow_empty=True,
    )  # fmt: skip
    try:
        adopted(argocd, tenant, app, tracking)
        healthy_and_committed(argocd, tenant, app)
        quiet(argocd, tenant, app)
        pruned_and_held(argocd, tenant, app)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{argocd.tails()}") from error
    finally:
        argocd.delete_app(app)
    assert argocd.conflicts() == []


def adopted(argocd: ArgoPeer, tenant: Tenant, app: str, tracking: str) -> None:
    """Argo CD applies both claims, the reconciler adopts them and copies them to the Control
    Plane without Argo CD's bookkeeping; our Lua says Progressing while nothing is Ready."""
    started = time.monotonic()
    for name in ("db", "guarded"):
        live = eventually(lambda n=name: _adopted(tenant, n), f"{name} applied and adopted", 90)
        copy = eventually(
            lambda n=name: tenant.control_plane.get(POSTGRES, tenant.mapped, n),
            f"the Control Plane copy of {name}",
        )
        meta = live["metadata"]
        if tracking == "annotation":
            assert meta["annotations"]["argocd.argoproj.io/tracking-id"].startswith(f"{app}:")
            assert objects.ARGOCD_INSTANCE_LABEL not in (meta.get("labels") or {})
        else:
            assert meta["labels"][objects.ARGOCD_INSTANCE_LABEL] == app
            assert not [k for k in meta.get("annotations") or {} if "argoproj" in k], meta
        assert {e["manager"] for e in meta["managedFields"]} <= TOOLS, meta["managedFields"]
        assert_clean(copy)
        assert copy["spec"] == live["spec"]
    print(f"[{tracking}] applied, adopted and copied in {time.monotonic() - started:.1f} s")
    health = eventually(  # Missing: the comparison before the sync, persisted late
        lambda: argocd.health(app, "db")[0] not in ("", "Missing") and argocd.health(app, "db")[0],
        "Argo CD's health of the live db",
    )
    assert health == "Progressing", argocd.health(app, "db")


def _adopted(tenant: Tenant, name: str) -> dict | None:
    live = tenant.app.get(POSTGRES, tenant.namespace, name)
    if live is None:
        return None
    meta = live["metadata"]
    ours = (meta.get("labels") or {}).get(objects.REPOSITORY_LABEL) == tenant.spec.name
    return live if ours and objects.FINALIZER in (meta.get("finalizers") or []) else None


def assert_clean(copy: dict) -> None:
    """The Control Plane copy carries none of Argo CD's labels or annotations, no finalizer."""
    meta = copy["metadata"]
    for key in [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]:
        assert not key.startswith(BOOKKEEPING), f"{key} reached the Control Plane: {meta}"
    assert not meta.get("finalizers"), meta.get("finalizers")


def healthy_and_committed(argocd: ArgoPeer, tenant: Tenant, app: str) -> None:
    """The provider reports Ready: the status comes back, our Lua says Healthy, and the status
    lands in Git."""
    started = time.monotonic()
    for name in ("db", "guarded"):
        report_ready(tenant, name)
    eventually(lambda: _ready(tenant, "db"), "Ready back on the App Cluster", 60)
    back = time.monotonic() - started
    eventually(lambda: argocd.health(app, "db")[0] == "Healthy", "Argo CD: db Healthy", 60)
    eventually(lambda: argocd.health(app)[0] == "Healthy", "Argo CD: the app Healthy", 60)
    # our Lua's message is the Ready condition's reason: Argo CD has no health of its own for
    # anynines.com kinds
    assert argocd.health(app, "db") == ("Healthy", "Available")
    seen = time.monotonic() - started
    status = f"claims/.klutch/status/{tenant.namespace}/PostgresqlInstance/db.yaml"

    def committed() -> bool:
        try:
            return "Ready" in json.dumps(yaml.safe_load(tenant.remote_file(status)))
        except Exception:
            return False

    eventually(committed, "the status commit with Ready", 60)
    print(
        f"status back {back:.1f} s, Argo CD Healthy {seen:.1f} s, committed "
        f"{time.monotonic() - started:.1f} s after the provider's Ready; "
        f"db: {argocd.health(app, 'db')}"
    )


def _ready(tenant: Tenant, name: str) -> bool:
    live = tenant.app.get(POSTGRES, tenant.namespace, name) or {}
    conditions = (live.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def quiet(argocd: ArgoPeer, tenant: Tenant, app: str) -> None:
    """No generation churn, no manager but the two, no OutOfSync over the window; Argo CD reads
    Git again (hard refresh) inside it, as a webhook would make it."""
    try:
        eventually(lambda: argocd.sync_status(app) == "Synced", "the app Synced", 60)
    except TimedOut as error:
        raise AssertionError(f"{error}: {_out_of_sync(argocd, app)}") from error
    before = _versions(tenant)
    writes: dict[str, set[str]] = {key: set() for key in before}
    seen: dict[str, int] = {}
    started = time.monotonic()
    refreshed = False
    while (elapsed := time.monotonic() - started) < WINDOW:
        if not refreshed and elapsed > WINDOW / 3:
            argocd.refresh(app)
            refreshed = True
        state = argocd.sync_status(app)
        seen[state] = seen.get(state, 0) + 1
        assert state == "Synced", _out_of_sync(argocd, app)
        for key, (generation, version) in _versions(tenant).items():
            assert generation == before[key][0], (
                f"{key}: generation {before[key][0]} -> {generation}"
            )
            writes[key].add(version)
        for name in ("db", "guarded"):
            live = tenant.app.get(POSTGRES, tenant.namespace, name)
            managers = {e["manager"] for e in live["metadata"]["managedFields"]}
            assert managers <= TOOLS, live["metadata"]["managedFields"]
        time.sleep(1.0)
    print(
        f"quiet for {WINDOW:.0f} s (hard refresh at {WINDOW / 3:.0f} s): sync states {seen}, "
        f"resourceVersions seen { ({k: len(v) for k, v in writes.items()}) }"
    )
    assert all(len(v) == 1 for v in writes.values()), writes


def _versions(tenant: Tenant) -> dict[str, tuple[int, str]]:
    found = {}
    for name in ("db", "guarded"):
        for side, kube, namespace in (
            ("app", tenant.app, tenant.namespace),
            ("cp", tenant.control_plane, tenant.mapped),
        ):
            meta = kube.get(POSTGRES, namespace, name)["metadata"]
            found[f"{side}/{name}"] = (meta["generation"], meta["resourceVersion"])
    return found


def _out_of_sync(argocd: ArgoPeer, app: str) -> str:
    status = argocd.app_object(app).get("status") or {}
    keys = ("sync", "resources", "conditions", "operationState")
    return json.dumps({key: status.get(key) for key in keys})


def pruned_and_held(argocd: ArgoPeer, tenant: Tenant, app: str) -> None:
    """Both claims leave Git; Argo CD prunes them. db is held by our finalizer until its Control
    Plane copy (held by a provider's finalizer here) is gone; guarded is held and reported, and
    its Control Plane copy stays."""
    patch = {"metadata": {"finalizers": ["provider.example/deprovision"]}}
    tenant.control_plane.patch(POSTGRES, tenant.mapped, "db", patch)
    tenant.push({"claims/db.yaml": None, "claims/guarded.yaml": None}, "drop the databases")
    argocd.refresh(app)
    started = time.monotonic()

    eventually(lambda: deleting(tenant.app, tenant.namespace, "db"), "Argo CD's prune", 90)
    eventually(
        lambda: deleting(tenant.control_plane, tenant.mapped, "db"), "the CP copy deleting", 60
    )
    live = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert objects.FINALIZER in live["metadata"]["finalizers"], live["metadata"]
    print(
        f"pruned and the CP copy deleting after {time.monotonic() - started:.1f} s; db held "
        f"with finalizers {live['metadata']['finalizers']}; Argo CD: {argocd.health(app)}, "
        f"{argocd.sync_status(app)}"
    )
    tenant.control_plane.patch(POSTGRES, tenant.mapped, "db", {"metadata": {"finalizers": None}})
    eventually(lambda: tenant.app.get(POSTGRES, tenant.namespace, "db") is None, "db gone", 60)

    eventually(lambda: deleting(tenant.app, tenant.namespace, "guarded"), "guarded pruned", 60)
    eventually(lambda: _refused(tenant, "guarded"), "the refusal reported", 60)
    assert not deleting(tenant.control_plane, tenant.mapped, "guarded")
    held = tenant.app.get(POSTGRES, tenant.namespace, "guarded")
    assert objects.FINALIZER in held["metadata"]["finalizers"], held["metadata"]
    print(f"guarded held: {argocd.health(app)}, {argocd.sync_status(app)}")


def deleting(kube: Kube, namespace: str, name: str) -> bool:
    live = kube.get(POSTGRES, namespace, name) or {}
    return bool(live.get("metadata", {}).get("deletionTimestamp"))


def _refused(tenant: Tenant, name: str) -> bool:
    events, _ = tenant.app.list(EVENTS, tenant.namespace)
    return any(
        e["reason"] == "DeletionRefused" and e["involvedObject"]["name"] == name for e in events
    )
