"""Less churn in Git (issue 15): a push with nothing new to report makes no bot commit, and two
registrations of the same repository and path keep each other's entry in reconcile.yaml.

Real clusters, real git, the in-process reconciler. Which commit a registration reconciled is
read from the git note it pushes under refs/notes/klutch-gitops: once a registration noted a
commit, its write-back for that pass has decided whether to commit.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from reconciler.sync.notes import NOTES_REF
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.tenant import Tenant, make_tenant, report_ready
from tests.kit.wait import eventually

BOT = "klutch-gitops[bot]"


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    """A tenant whose repository two registrations follow at the same path: its own, and a twin
    for the App namespace ``default``, which refuses the tenant's claims (another namespace)."""
    base = make_tenant(stack, clusters, tmp_path, start=False)
    twin = replace(base.spec, name=f"{base.spec.name}-twin", app_namespaces=("default",))
    world = replace(base, config=replace(base.config, repositories=(base.spec, twin)))
    world.reconciler.start()
    yield world
    world.reconciler.stop()


def noted(tenant: Tenant, sha: str) -> set[str]:
    """The registrations whose note on ``sha`` the remote holds."""
    try:
        note = git(tenant.remote, "notes", f"--ref={NOTES_REF}", "show", sha)
    except subprocess.CalledProcessError:
        return set()
    return set(yaml.safe_load(note))


def entries(tenant: Tenant) -> dict:
    try:
        report = tenant.remote_file("claims/.klutch/reconcile.yaml")
    except subprocess.CalledProcessError:
        return {}
    return yaml.safe_load(report)["registrations"]


def bot_commits_since(tenant: Tenant, sha: str) -> list[str]:
    log = git(tenant.remote, "log", "--format=%H %an", f"{sha}..main").splitlines()
    assert all(line.endswith(f" {BOT}") for line in log), f"a human commit after {sha}: {log}"
    return [line.split()[0] for line in log]


def reconciled_by_both(tenant: Tenant, sha: str) -> None:
    names = {spec.name for spec in tenant.config.repositories}
    eventually(lambda: noted(tenant, sha) == names, f"both registrations to note {sha[:8]}", 60)
    for spec in tenant.config.repositories:  # the pass applied it, or a status commit on it
        applied = tenant.reconciler.syncs[spec.name].last_pass.commit
        git(tenant.remote, "merge-base", "--is-ancestor", sha, applied)


def quiet(tenant: Tenant, seconds: float = 2.0) -> str:
    """The remote's head, once it stayed the same for ``seconds`` (the batch window is 0.3 s)."""
    head = git(tenant.remote, "rev-parse", "main")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.2)
        now = git(tenant.remote, "rev-parse", "main")
        if now != head:
            head, deadline = now, time.monotonic() + seconds
    return head


def test_a_push_with_nothing_new_to_report_makes_no_bot_commit(tenant: Tenant) -> None:
    mine, twin = (spec.name for spec in tenant.config.repositories)
    first = tenant.push({"claims/orders.yaml": claim("orders", tenant.namespace)})
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "orders"), "the CP copy")
    report_ready(tenant, "orders")

    def settled() -> bool:
        report = entries(tenant)
        assert {mine, twin} <= set(report), f"entries so far: {sorted(report)}"  # not yet: again
        assert report[mine]["counts"]["ready"] == 1
        assert report[twin]["counts"]["claims"] == 0
        assert [r["file"] for r in report[twin]["rejections"]] == ["claims/orders.yaml"]
        return "status:" in tenant.remote_file("claims/orders.yaml")

    eventually(settled, "the status and both registrations' entries in Git", 60)
    reconciled_by_both(tenant, first)
    quiet(tenant)

    # A comment in a claim file, then a file that is no claim: nothing observable changes.
    text = "# the team's orders database, reviewed\n" + tenant.remote_file("claims/orders.yaml")
    for files in ({"claims/orders.yaml": text}, {"claims/README.md": "Our databases.\n"}):
        pushed = tenant.push(files, "nothing a cluster sees")
        reconciled_by_both(tenant, pushed)
        assert quiet(tenant) == pushed, "a bot commit for a push with nothing new to report"

    # A refused document is new to both reports: one status commit each, each its own entry.
    pushed = tenant.push({"claims/broken.yaml": "kind: [unclosed\n"}, "a typo")
    reconciled_by_both(tenant, pushed)

    def refused() -> bool:
        report = entries(tenant)
        return all(
            "claims/broken.yaml" in {r["file"] for r in report[n]["rejections"]}
            for n in (mine, twin)
        )

    eventually(refused, "the refusal in both entries", 60)
    quiet(tenant)
    bots = bot_commits_since(tenant, pushed)
    assert len(bots) == 2, bots
    for sha in bots:
        changed = git(tenant.remote, "diff-tree", "--no-commit-id", "--name-only", "-r", sha)
        assert changed == "claims/.klutch/reconcile.yaml"
    report = entries(tenant)
    assert report[mine]["counts"]["ready"] == 1  # neither write-back lost the other's entry
    assert report[twin]["counts"]["claims"] == 0
