"""``appSync: external``: Argo CD or Flux applies the claims to the App Cluster and the reconciler
mirrors them. The tools are stood in for by what they send the real App Cluster: server-side
applies with their field managers, labels and annotations, and deletes when they prune."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from klutch_gitops.kube.resources import EVENTS, SECRETS
from reconciler.sync import objects
from tests.kit.claims import POSTGRES, claim, ready_status
from tests.kit.git import git
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

from ..argocd_health import argocd_health

CYCLES = 20
KIND = f"{POSTGRES.plural}.{POSTGRES.group}"
BOOKKEEPING = (
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "kubectl.kubernetes.io/",
    "app.kubernetes.io/instance",
    objects.PREFIX,
)


@dataclass
class Tool:
    """A GitOps controller as the App Cluster sees it."""

    manager: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    last_applied: bool = False  # kubectl's annotation, as Argo CD's client-side apply leaves it

    def sync(self, tenant: Tenant, file: str) -> None:
        """Apply the file as it is on the remote's main; never forced: taking a field that
        another manager owns would be a 409 here."""
        for doc in yaml.safe_load_all(tenant.remote_file(file)):
            doc.pop("status", None)
            meta = doc["metadata"]
            annotations = {**(meta.get("annotations") or {}), **self.annotations}
            if self.last_applied:
                key = "kubectl.kubernetes.io/last-applied-configuration"
                annotations[key] = json.dumps(doc, sort_keys=True)
            meta["labels"] = {**(meta.get("labels") or {}), **self.labels}
            if annotations:  # an empty map would make every apply a change
                meta["annotations"] = annotations
            tenant.app.apply(POSTGRES, doc, field_manager=self.manager)


def argocd(tenant: Tenant, name: str) -> Tool:
    return Tool(
        "argocd-controller",
        labels={"app.kubernetes.io/instance": "team-data"},
        annotations={
            "argocd.argoproj.io/tracking-id": (
                f"team-data:anynines.com/PostgresqlInstance:{tenant.namespace}/{name}"
            ),
            "argocd.argoproj.io/sync-options": "ServerSideApply=true",
        },
        last_applied=True,
    )


def argocd_by_label() -> Tool:
    """Argo CD's label tracking (``application.resourceTrackingMethod: label``; since v3 the
    default is ``annotation``, util/settings/settings.go GetTrackingMethod): SetAppInstance
    (util/argo/resource_tracking.go) then sets only the label, no annotation. The label key is
    common.LabelKeyAppInstance, ``app.kubernetes.io/instance`` (common/common.go), its value the
    Application's name; the field manager is common.ArgoCDSSAManager, ``argocd-controller``,
    passed by controller/sync.go (sync.WithServerSideApplyManager) to gitops-engine's
    pkg/sync/sync_context.go applyObject."""
    return Tool("argocd-controller", labels={objects.ARGOCD_INSTANCE_LABEL: "team-data"})


FLUX = Tool(
    "kustomize-controller",
    labels={
        "kustomize.toolkit.fluxcd.io/name": "team-data",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    },
)


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path, mode="files", app_sync="external")
    yield world
    world.reconciler.stop()


def repository(tenant: Tenant) -> str:
    return tenant.config.repositories[0].name


def caught_up(tenant: Tenant) -> None:
    """Wait until the reconciler has fetched the remote's main (or its own status commit on
    top of it) and serves the claim kind."""
    sync = eventually(lambda: tenant.reconciler.syncs.get(repository(tenant)), "the registration")
    sync.trigger_fetch()
    head = git(tenant.remote, "rev-parse", "main")

    def fetched() -> bool:
        seen = sync.head
        if seen is None or KIND not in sync.view.app_claim_caches:
            return False
        ancestor = subprocess.run(
            ["git", "merge-base", "--is-ancestor", head, seen], cwd=tenant.remote, check=False
        )
        return ancestor.returncode == 0

    eventually(fetched, "the fetch")


def versions(tenant: Tenant, names: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """resourceVersions of the App objects and their Control Plane copies."""
    return {
        name: (
            _rv(tenant.app.get(POSTGRES, tenant.namespace, name)),
            _rv(tenant.control_plane.get(POSTGRES, tenant.mapped, name)),
        )
        for name in names
    }


def settle(tenant: Tenant, names: list[str]) -> dict[str, tuple[str | None, str | None]]:
    """Run passes until one writes nothing, each on caches that have seen every earlier write:
    the reconciler's fixed point. One that never comes is flapping."""
    sync = tenant.reconciler.syncs[repository(tenant)]
    passes = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and passes < 20:
        current = versions(tenant, names)
        cp_cache = sync.view.cp_claim_caches.get((KIND, tenant.mapped))
        cached = {
            name: (
                _rv(sync.view.app_claim_caches[KIND].get(tenant.namespace, name)),
                _rv(cp_cache.get(tenant.mapped, name) if cp_cache else None),
            )
            for name in names
        }
        if cached != current or not sync.settled():
            time.sleep(0.05)  # let the watches deliver
            continue
        sync.sync()
        passes += 1
        if versions(tenant, names) == current:
            return current
    pytest.fail(f"the reconciler does not settle after {passes} passes: {versions(tenant, names)}")


def _rv(obj: dict | None) -> str | None:
    return obj["metadata"]["resourceVersion"] if obj else None


def report(tenant: Tenant, name: str, status: dict[str, Any]) -> None:
    """What a provider does: write the Control Plane copy's status."""
    tenant.control_plane.apply(
        POSTGRES,
        {
            "apiVersion": "anynines.com/v1",
            "kind": "PostgresqlInstance",
            "metadata": {"name": name, "namespace": tenant.mapped},
            "status": status,
        },
        field_manager="provider",
        force=True,
        subresource="status",
    )


def problems(tenant: Tenant) -> list[str]:
    report = tenant.reconciler.syncs[repository(tenant)].schedule.report
    assert report is not None
    return [r.message for r in report.summary.rejections]


def managers(obj: dict) -> dict[tuple[str, str, str], dict]:
    return {
        (e["manager"], e["operation"], e.get("subresource", "")): e["fieldsV1"]
        for e in obj["metadata"]["managedFields"]
    }


def assert_clean(copy: dict) -> None:
    meta = copy["metadata"]
    for key in [*(meta.get("labels") or {}), *(meta.get("annotations") or {})]:
        assert not key.startswith(BOOKKEEPING), f"{key} reached the Control Plane"
    assert not meta.get("finalizers"), meta.get("finalizers")


def test_argo_and_flux_applies_alternate_with_the_reconciler_without_flapping(
    tenant: Tenant,
) -> None:
    names = ["argo-db", "flux-db"]
    tenant.push({f"claims/{n}.yaml": claim(n, tenant.namespace) for n in names})
    caught_up(tenant)
    argo = argocd(tenant, "argo-db")
    tools = {"argo-db": argo, "flux-db": FLUX}
    previous: dict[str, tuple[str | None, str | None]] = {}
    for cycle in range(CYCLES):
        changed = cycle == 0
        if cycle == 5:  # the provider reports both ready
            for name in names:
                report(tenant, name, ready_status())
            changed = True
        if cycle == 10:  # a plan change through Git, synced by Argo CD
            tenant.push(
                {
                    "claims/argo-db.yaml": claim(
                        "argo-db", tenant.namespace, "postgresql-single-small"
                    )
                }
            )
            changed = True
        for name, tool in tools.items():
            tool.sync(tenant, f"claims/{name}.yaml")
        if cycle == 10:
            settle(tenant, names)
            # the Control Plane has the new spec but has not observed it yet
            assert argocd_health(tenant.app.get(POSTGRES, tenant.namespace, "argo-db"))[0] == (
                "Progressing"
            )
            upstream = tenant.control_plane.get(POSTGRES, tenant.mapped, "argo-db")
            report(tenant, "argo-db", ready_status(upstream["metadata"]["generation"]))
        current = settle(tenant, names)
        assert problems(tenant) == [], f"cycle {cycle}"
        if not changed:
            assert current == previous, f"cycle {cycle}: something flapped"
        previous = current

        for name, tool in tools.items():
            live = tenant.app.get(POSTGRES, tenant.namespace, name)
            meta = live["metadata"]
            assert meta["labels"][objects.REPOSITORY_LABEL] == repository(tenant)
            assert meta["finalizers"] == [objects.FINALIZER]
            fields = managers(live)
            assert {m for m, _, _ in fields} <= {tool.manager, "klutch-gitops"}, fields
            ours = fields[("klutch-gitops", "Apply", "")]  # our label and finalizer, no more
            assert set(ours) == {"f:metadata"}, ours
            assert set(ours["f:metadata"]) == {"f:labels", "f:finalizers"}, ours
            assert set(ours["f:metadata"]["f:labels"]) - {"."} == {
                f"f:{objects.REPOSITORY_LABEL}"
            }, ours
            assert "f:spec" in fields[(tool.manager, "Apply", "")]
            copy = tenant.control_plane.get(POSTGRES, tenant.mapped, name)
            assert copy["spec"] == live["spec"]
            assert_clean(copy)
            if cycle >= 5:
                assert set(fields[("klutch-gitops", "Apply", "status")]) == {"f:status"}
                assert live["status"]["conditions"][0]["status"] == "True", f"cycle {cycle}"
                assert argocd_health(live) == ("Healthy", "Available"), f"cycle {cycle}"

    upstream = tenant.control_plane.get(POSTGRES, tenant.mapped, "argo-db")
    assert upstream["spec"]["plan"] == "postgresql-single-small"

    def committed() -> dict | None:
        try:
            text = tenant.remote_file(
                f"claims/.klutch/status/{tenant.namespace}/PostgresqlInstance/argo-db.yaml"
            )
        except Exception:
            return None
        written = yaml.safe_load(text)
        # An earlier commit may hold the claim before its status came back: wait for Ready.
        return written if "Ready" in json.dumps(written) else None

    eventually(committed, "the status commit with Ready")
    assert "status:" not in tenant.remote_file("claims/argo-db.yaml")  # files mode
    assert problems(tenant) == []


def test_argo_cds_tracking_label_stays_off_the_control_plane(tenant: Tenant) -> None:
    """Label tracking leaves no annotation of Argo CD's on the object: only its field manager
    tells its ``app.kubernetes.io/instance`` from a person's, and the informer's cache must keep
    that much of managedFields."""
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    caught_up(tenant)
    argocd_by_label().sync(tenant, "claims/db.yaml")
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    settle(tenant, ["db"])
    assert problems(tenant) == []

    live = tenant.app.get(POSTGRES, tenant.namespace, "db")
    meta = live["metadata"]
    assert meta["labels"][objects.ARGOCD_INSTANCE_LABEL] == "team-data"
    assert not any(k.startswith("argocd.argoproj.io/") for k in meta.get("annotations") or {})
    assert {m for m, _, _ in managers(live)} == {"argocd-controller", "klutch-gitops"}
    assert meta["labels"][objects.REPOSITORY_LABEL] == repository(tenant)
    assert meta["finalizers"] == [objects.FINALIZER]

    copy = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
    assert objects.ARGOCD_INSTANCE_LABEL not in (copy["metadata"].get("labels") or {})
    assert_clean(copy)
    assert copy["metadata"]["annotations"][objects.BOUND_ANNOTATION] == "true"
    assert copy["spec"] == live["spec"]


def test_the_reconciler_mirrors_what_the_tool_applied_not_what_git_says(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    caught_up(tenant)
    settle(tenant, ["db"])
    # Git alone changes nothing: the reconciler applies no spec to the App Cluster
    assert tenant.app.get(POSTGRES, tenant.namespace, "db") is None
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is None

    FLUX.sync(tenant, "claims/db.yaml")
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")

    # a new commit the tool has not synced yet (manual sync, a suspended Kustomization)
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace, "postgresql-single-big")})
    caught_up(tenant)
    settle(tenant, ["db"])
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "db")["spec"]["plan"] == (
        "postgresql-single-nano"
    )
    FLUX.sync(tenant, "claims/db.yaml")
    eventually(
        lambda: (
            tenant.control_plane.get(POSTGRES, tenant.mapped, "db")["spec"]["plan"]
            == "postgresql-single-big"
        ),
        "the synced change upstream",
    )

    # an object in the namespace that the repository does not name stays someone else's
    other = yaml.safe_load(claim("someone-elses", tenant.namespace))
    tenant.app.apply(POSTGRES, other, field_manager="kubectl")
    settle(tenant, ["db", "someone-elses"])
    live = tenant.app.get(POSTGRES, tenant.namespace, "someone-elses")
    assert objects.REPOSITORY_LABEL not in (live["metadata"].get("labels") or {})
    assert not live["metadata"].get("finalizers")
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "someone-elses") is None


def test_credentials_flow_down_to_the_tools_object(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    caught_up(tenant)
    argocd(tenant, "db").sync(tenant, "claims/db.yaml")
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    tenant.control_plane.apply(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db-conn", "namespace": tenant.mapped},
            "stringData": {"password": "from-the-provider"},
        },
        field_manager="provider",
        force=True,
    )
    copy = eventually(
        lambda: tenant.app.get(SECRETS, tenant.namespace, "db-conn"), "the credentials"
    )
    owner = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert copy["metadata"]["ownerReferences"][0]["uid"] == owner["metadata"]["uid"]
    assert copy["metadata"]["annotations"][objects.RESOURCE_OWNER] == "Provider"


def test_a_pruned_claim_is_held_until_its_control_plane_copy_is_gone(tenant: Tenant) -> None:
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)})
    caught_up(tenant)
    FLUX.sync(tenant, "claims/db.yaml")
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    settle(tenant, ["db"])
    tenant.control_plane.patch(
        POSTGRES,
        tenant.mapped,
        "db",
        {"metadata": {"finalizers": ["provider.example/deprovision"]}},
    )

    # the claim leaves Git and the tool prunes it
    tenant.push({"claims/db.yaml": None}, "drop the database")
    tenant.app.delete(POSTGRES, tenant.namespace, "db")
    eventually(
        lambda: (
            (tenant.control_plane.get(POSTGRES, tenant.mapped, "db") or {})
            .get("metadata", {})
            .get("deletionTimestamp")
        ),
        "the CP copy to be deleting",
    )
    live = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert live is not None
    assert objects.FINALIZER in live["metadata"]["finalizers"]

    tenant.control_plane.patch(POSTGRES, tenant.mapped, "db", {"metadata": {"finalizers": None}})
    eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "db") is None, "the App copy to go"
    )


def test_a_protected_claim_keeps_its_service_when_the_tool_deletes_it(tenant: Tenant) -> None:
    """Deleted while Git names it: released without touching the copy, re-created by the tool
    and adopted again. Deleted after it left Git: held and reported (Ready False) until it is
    back in Git or the annotation goes, which deletes the service (issue 16, defect 4)."""
    protected = claim("db", tenant.namespace).replace(
        "  namespace:",
        f'  annotations:\n    {objects.DELETION_PROTECTION}: "true"\n  namespace:',
        1,
    )
    tenant.push({"claims/db.yaml": protected})
    caught_up(tenant)
    tool = argocd(tenant, "db")
    tool.sync(tenant, "claims/db.yaml")
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the CP copy")
    # the copy says it is protected, where the bind API refuses an unforced unbind that would
    # delete it (bind_api/unbinding.py)
    copy = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
    assert copy["metadata"]["annotations"][objects.DELETION_PROTECTION] == "true"
    first = eventually(lambda: adopted_uid(tenant), "adopted")

    tenant.app.delete(POSTGRES, tenant.namespace, "db")  # Git still names it
    eventually(lambda: tenant.app.get(POSTGRES, tenant.namespace, "db") is None, "released")
    tool.sync(tenant, "claims/db.yaml")  # the tool puts it back, as it would
    eventually(lambda: adopted_uid(tenant) not in (None, first), "adopted again")
    kept = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
    assert kept["metadata"]["uid"] == copy["metadata"]["uid"]
    assert kept["metadata"].get("deletionTimestamp") is None

    tenant.push({"claims/db.yaml": None}, "drop the protected database")
    caught_up(tenant)
    tenant.app.delete(POSTGRES, tenant.namespace, "db")  # the tool prunes it
    eventually(
        lambda: any("deletion-protected" in p for p in problems(tenant)), "the refusal reported"
    )
    settle(tenant, ["db"])
    assert tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is not None
    held = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert held["metadata"]["deletionTimestamp"]
    ready = next(c for c in held["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "DeletionHeld")
    events, _ = tenant.app.list(EVENTS, tenant.namespace)
    assert [e["reason"] for e in events].count("DeletionRefused") == 1

    tenant.app.patch(
        POSTGRES,
        tenant.namespace,
        "db",
        {"metadata": {"annotations": {objects.DELETION_PROTECTION: None}}},
    )
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db") is None, "the CP copy to go"
    )
    eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "db") is None, "the App copy to go"
    )


def adopted_uid(tenant: Tenant) -> str | None:
    """The App object's uid once it carries our finalizer."""
    live = tenant.app.get(POSTGRES, tenant.namespace, "db") or {"metadata": {}}
    if objects.FINALIZER not in (live["metadata"].get("finalizers") or []):
        return None
    return live["metadata"]["uid"]
