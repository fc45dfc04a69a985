"""The reconciler SIGKILLed at exact moments, held there by failpoints: with a status commit made
but not pushed (or pushed but not recorded), and between Control Plane applies of a pass. The
next process, on the same work dir, converges without a duplicate commit, a lost human commit,
or an orphan on the Control Plane."""

from __future__ import annotations

import pytest

from tests.kit.claims import claim, git_claims, is_ready, live_claims
from tests.kit.git import commits, duplicates, git, lost, touching
from tests.kit.tenant import Tenant, mirrored, reconciled, report_ready
from tests.kit.wait import eventually

from .harness import ReconcilerProcess

APPLY_POINT = "controlplane.after-apply"


@pytest.mark.parametrize("point", ["git.before-push", "git.after-push"])
def test_killed_during_a_status_commit(
    point: str, tenant: Tenant, reconciler: ReconcilerProcess
) -> None:
    names = ("a", "b", "c")
    files = {f"claims/{name}.yaml": claim(name, tenant.namespace) for name in names}
    pushed = [tenant.push(files, "three databases")]
    reconciler.start()
    eventually(lambda: mirrored(tenant, git_claims(tenant.remote)), "the claims everywhere", 120)
    eventually(lambda: reconciled(tenant) == pushed[-1], "the first reconcile report", 120)
    reconciler.stop()

    for name in names:
        report_ready(tenant, name)  # the provider, while no reconciler runs
    reconciler.start(failpoints={point: "pause"})
    reconciler.wait_paused(point)
    writer = reconciler.work_dir / tenant.config.repositories[0].name / "write-back"
    made = git(writer, "rev-parse", "HEAD")
    assert set(git(writer, "show", "--format=", "--name-only", made).split()) & set(files)
    assert (made in git(tenant.remote, "rev-list", "main").split()) == (point == "git.after-push")
    pushed.append(tenant.push({"README.md": "team claims, reviewed\n"}, "a person, meanwhile"))
    reconciler.kill()

    reconciler.start()
    eventually(
        lambda: all(is_ready(doc.get("status")) for doc in git_claims(tenant.remote).values()),
        "the status in Git",
        120,
    )
    eventually(lambda: reconciled(tenant) == pushed[-1], "the person's commit reconciled", 120)
    reconciler.wait_ready()

    history = commits(tenant.remote)
    assert lost(tenant.remote, pushed) == []
    assert duplicates(history) == []
    for file in files:
        assert len(touching(history, file)) == 1, f"the status of {file} committed twice"
    # unpushed, the killed commit is gone with the process; pushed, it is the one that counts
    assert any(c.sha == made for c in history) == (point == "git.after-push")


def test_killed_between_control_plane_applies(
    tenant: Tenant, reconciler: ReconcilerProcess
) -> None:
    names = [f"db-{i:02d}" for i in range(20)]
    files = {f"claims/{name}.yaml": claim(name, tenant.namespace) for name in names}
    pushed = [tenant.push(files, "twenty databases")]
    reconciler.start(failpoints={APPLY_POINT: "pause"})
    reconciler.wait_paused(APPLY_POINT)
    applied = sorted(live_claims(tenant.control_plane, tenant.mapped))
    assert 0 < len(applied) < len(names)  # some, not all: each apply thread stops after one
    reconciler.kill()

    # While no reconciler runs, a person deletes a claim that reached the Control Plane and one
    # that did not, and makes a third bigger.
    gone, never = applied[0], sorted(set(names) - set(applied))[0]
    bigger = next(n for n in reversed(names) if n not in (gone, never))
    pushed.append(
        tenant.push(
            {
                f"claims/{gone}.yaml": None,
                f"claims/{never}.yaml": None,
                f"claims/{bigger}.yaml": claim(
                    bigger, tenant.namespace, plan="postgresql-single-small"
                ),
            },
            "two databases fewer, one bigger",
        )
    )
    expected = git_claims(tenant.remote)
    assert sorted(expected) == sorted(set(names) - {gone, never})
    assert expected[bigger]["spec"]["plan"] == "postgresql-single-small"

    reconciler.start()
    eventually(lambda: mirrored(tenant, expected), "both clusters to match Git, no orphan", 180)
    eventually(lambda: reconciled(tenant) == pushed[-1], "the last push reconciled", 120)
    reconciler.wait_ready()
    history = commits(tenant.remote)
    assert lost(tenant.remote, pushed) == []
    assert duplicates(history) == []
