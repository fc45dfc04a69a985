"""What makes the reconciler look at Git when the real Flux acts on a commit it has not fetched
(defect 2 of issue 16): with the global poll interval at an hour and no webhook, a claim pushed to
Git and applied by kustomize-controller v1.9.6 (tests/kit/flux.py) is adopted within seconds,
and a deletion-protected claim Flux prunes is held, not taken for one that is back in Git.

The reconciler's remote is the same repository over HTTPS (tests/gitserver.py), as Flux reads
it: a ``file://`` remote is watched through the file system, which would see the push at once.
What Flux does, from kustomize-controller@v1.9.6 internal/controller/kustomization_controller.go:
it server-side applies the objects under the Kustomization's path with the field manager
``kustomize-controller`` and labels them ``kustomize.toolkit.fluxcd.io/name``/``…/namespace``;
the reconciler's informer sees that App object before any poll of its own tells it the commit.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from klutch_gitops.apis import DELETION_PROTECTION
from reconciler.sync import objects
from tests.integration.test_poll_interval import quiet
from tests.kit.claims import POSTGRES, claim, is_ready
from tests.kit.flux import FluxPeer
from tests.kit.tenant import Tenant, make_tenant, report_ready
from tests.kit.wait import eventually

pytestmark = [pytest.mark.integration, pytest.mark.peers]

POLL = 3600.0  # the reconciler's only poll of the remote is its first one
FLUX_WAIT = 60.0  # Flux's first fetch and apply, on a loaded two-core machine
ADOPTED = 20.0  # "seconds, not an hour": the bound on adoption after Flux applied


@pytest.fixture
def tenant(stack, clusters, flux: FluxPeer, tmp_path: Path) -> Iterator[Tenant]:
    """An ``appSync: external`` tenant whose reconciler polls its HTTPS remote once an hour."""
    world = make_tenant(stack, clusters, tmp_path, mode="files", app_sync="external", start=False)
    spec = replace(world.spec, url=flux.serve(world.remote))
    world = replace(world, config=replace(world.config, repositories=(spec,), poll_interval=POLL))
    world.reconciler.start()
    yield world
    world.reconciler.stop()


def adopted(tenant: Tenant, name: str) -> dict | None:
    """The App claim once it carries our finalizer and repository label."""
    live = tenant.app.get(POSTGRES, tenant.namespace, name) or {}
    meta = live.get("metadata") or {}
    ours = (meta.get("labels") or {}).get(objects.REPOSITORY_LABEL) == tenant.spec.name
    return live if ours and objects.FINALIZER in (meta.get("finalizers") or []) else None


def test_a_claim_flux_applies_is_adopted_without_waiting_for_a_poll(
    flux: FluxPeer, tenant: Tenant
) -> None:
    name = tenant.spec.name
    quiet(tenant.reconciler, name)  # its only poll answered and followed: a fetch needs a reason
    sync = tenant.reconciler.syncs[name]
    before = sync.head
    tenant.push({"claims/db.yaml": claim("db", tenant.namespace)}, "a new database")
    flux.sync(name, flux.serve(tenant.remote), f"./{tenant.spec.path}")
    eventually(
        lambda: tenant.app.get(POSTGRES, tenant.namespace, "db"),
        f"Flux to apply db\n{flux.tails()}",
        timeout=FLUX_WAIT,
        interval=0.05,
    )
    applied = time.monotonic()

    eventually(lambda: adopted(tenant, "db"), "our finalizer and label", timeout=ADOPTED)
    took_adopted = time.monotonic() - applied
    copy = eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"),
        "the Control Plane copy",
        timeout=ADOPTED,
    )
    took_copy = time.monotonic() - applied
    assert copy["spec"] == tenant.app.get(POSTGRES, tenant.namespace, "db")["spec"]
    report_ready(tenant, "db")
    eventually(
        lambda: is_ready(tenant.app.get(POSTGRES, tenant.namespace, "db").get("status")),
        "Ready mirrored back to the App claim",
        timeout=ADOPTED,
    )
    took_status = time.monotonic() - applied
    print(
        f"after Flux applied: adopted {took_adopted:.2f} s, Control Plane copy {took_copy:.2f} s,"
        f" status back {took_status:.2f} s (reconciler poll interval {POLL:.0f} s, no webhook)"
    )
    assert sync.head != before, "the claim was adopted without the commit that names it"
    flux.suspend(name)  # its deletion prunes nothing then
    flux.delete(name)


def holds(tenant: Tenant, head: str | None, commit: str) -> bool:
    """Whether the reconciler's view ``head`` has ``commit`` (its own status commits on top)."""
    if head is None:
        return False
    check = ["git", "merge-base", "--is-ancestor", commit, head]
    return subprocess.run(check, cwd=tenant.remote, check=False).returncode == 0


def pruned_or_gone(live: dict | None) -> bool:
    """Deleting, or already gone: a let-go held object can go between two looks."""
    return live is None or bool(live["metadata"].get("deletionTimestamp"))


def protected_claim(name: str, namespace: str) -> str:
    return f"""apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: {name}
  namespace: {namespace}
  annotations:
    {DELETION_PROTECTION}: "true"
spec:
  service: a9s-postgresql13
  plan: postgresql-single-nano
"""


def test_a_protected_claim_flux_prunes_is_held_though_the_git_view_still_names_it(
    flux: FluxPeer, tenant: Tenant
) -> None:
    """kustomize-controller prunes (a DELETE) what left the source; the reconciler's Git view,
    polled hourly, still names the claim. Judged by that view, the held object would be one
    whose claim is back in Git and let go; the deletion is the sign to fetch first."""
    name = tenant.spec.name
    quiet(tenant.reconciler, name)
    tenant.push({"claims/db.yaml": protected_claim("db", tenant.namespace)}, "a kept database")
    flux.sync(name, flux.serve(tenant.remote), f"./{tenant.spec.path}")
    eventually(lambda: adopted(tenant, "db"), f"db adopted\n{flux.tails()}", timeout=FLUX_WAIT)
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the copy")

    removed = tenant.push({"claims/db.yaml": None}, "drop the database")
    eventually(
        lambda: pruned_or_gone(tenant.app.get(POSTGRES, tenant.namespace, "db")),
        f"Flux to prune db\n{flux.tails()}",
        timeout=FLUX_WAIT,
        interval=0.05,
    )
    pruned = time.monotonic()
    sync = tenant.reconciler.syncs[name]
    eventually(
        lambda: (
            holds(tenant, sync.head, removed)
            or tenant.app.get(POSTGRES, tenant.namespace, "db") is None
        ),
        "the reconciler to fetch the removal, or to let the claim go",
    )
    print(f"looked {time.monotonic() - pruned:.2f} s after Flux pruned")
    time.sleep(5.0)  # passes run on every event meanwhile; a release would happen now
    held = tenant.app.get(POSTGRES, tenant.namespace, "db")
    assert held is not None, "the deletion-protected claim was let go as if back in Git"
    assert objects.FINALIZER in held["metadata"]["finalizers"]
    assert holds(tenant, sync.head, removed), "held by a Git view that still names it"
    copy = tenant.control_plane.get(POSTGRES, tenant.mapped, "db")
    assert copy is not None
    assert not copy["metadata"].get("deletionTimestamp")
    flux.suspend(name)
    flux.delete(name)
