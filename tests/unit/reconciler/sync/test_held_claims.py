"""Held deletions and progress: the pure decisions and the finalize/observe stages (issue 16,
defects 4-6) against the in-memory view (tests/unit/reconciler/sync/fakeview.py)."""

from __future__ import annotations

from klutch_gitops.kube.client import KubeError, Resource
from reconciler.sync import objects, progress
from reconciler.sync.app_status import AppStatusInputs, app_status, git_status
from reconciler.sync.desired import DesiredState
from reconciler.sync.observe import observe
from reconciler.sync.outcome import Held
from reconciler.sync.prune import finalize
from reconciler.sync.writeback import Mode, Schedule
from tests.unit.reconciler.sync.fakeview import FakeView
from tests.unit.reconciler.sync.test_sync_stages import (
    APP_NS,
    CP_NS,
    EXPORT,
    KIND,
    REPO,
    claim,
    ours,
)

OTHER = "example.com/another-controller"


def held_view(in_git: bool = True) -> tuple[FakeView, dict]:
    view = FakeView([EXPORT], REPO)
    view.mapping[APP_NS] = CP_NS
    live = ours("db", deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion="7")
    live["metadata"]["annotations"][objects.DELETION_PROTECTION] = "true"
    view.put_app(live)
    copy = objects.control_plane_object(claim("db"), CP_NS, protected=True)
    copy["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    view.put_cp(copy)
    return view, live


def test_a_held_claim_back_in_git_is_released_without_touching_its_control_plane_copy() -> None:
    view, _ = held_view()
    held, problems = finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git={claim().identity})
    assert (held, problems) == (set(), [])
    assert view.writes == [("patch", "app", KIND, APP_NS, "db")]  # no delete on the CP
    assert (KIND, CP_NS, "db") in view.cp
    assert view.app[(KIND, APP_NS, "db")]["metadata"]["finalizers"] is None
    assert [e[1] for e in view.normal_events] == ["Released"]


def test_a_held_claim_out_of_git_stays_held_and_says_how_to_keep_it() -> None:
    view, _ = held_view()
    held, problems = finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git=())
    assert held == {claim().identity}
    assert "put the claim back in Git" in problems[0].fix
    assert [p.identity for p in problems] == [claim().identity]
    assert view.writes == []


class RacingView(FakeView):
    """Another controller adds its finalizer between our read and our write: the API server
    refuses a merge patch whose resourceVersion is not the object's (409 Conflict)."""

    raced = False

    def patch_app(self, resource: Resource, namespace: str, name: str, patch: dict) -> None:
        live = self.app[(resource.kind, namespace, name)]
        if not self.raced:
            self.raced = True
            live["metadata"]["finalizers"] = [*live["metadata"]["finalizers"], OTHER]
            live["metadata"]["resourceVersion"] = "8"
        if patch["metadata"].get("resourceVersion") != live["metadata"]["resourceVersion"]:
            raise KubeError(409, "Conflict", "the object has been modified")
        super().patch_app(resource, namespace, name, patch)


def test_a_finalizer_added_during_the_release_survives() -> None:
    view = RacingView([EXPORT], REPO)
    view.mapping[APP_NS] = CP_NS
    view.put_app(ours("db", deletionTimestamp="2026-01-01T00:00:00Z", resourceVersion="7"))
    finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git=())
    assert view.app[(KIND, APP_NS, "db")]["metadata"]["finalizers"] == [OTHER]


def test_the_release_patch_carries_its_precondition() -> None:
    live = ours("db", resourceVersion="7")
    live["metadata"]["finalizers"] = [OTHER, objects.FINALIZER]
    assert objects.finalizer_release(live) == {
        "metadata": {"resourceVersion": "7", "finalizers": [OTHER]}
    }
    live["metadata"]["finalizers"] = [OTHER]
    assert objects.finalizer_release(live) is None


def test_a_held_claim_says_ready_false_and_counts_as_held_not_ready() -> None:
    view, _ = held_view()
    _, problems = finalize(view, REPO, (APP_NS,), "claims", (), set(), in_git=())
    desired = DesiredState((claim(),), ())  # e.g. a pass whose Git view is not fetched yet
    statuses = observe(view, desired, (), REPO, problems)
    status = view.app[(KIND, APP_NS, "db")]["status"]
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", progress.DELETION_HELD)
    assert "deletion-protected" in ready["message"]
    assert not any(c["type"] == "Synced" for c in status["conditions"])  # not a refusal
    schedule = Schedule(Mode.FILES, REPO)
    schedule.plan(desired, statuses, problems, "c1")
    assert schedule.report is not None
    assert schedule.report.summary.counts["ready"] == 0
    assert schedule.report.summary.counts["held"] == 1
    assert isinstance(problems[0], Held)
    assert problems[0].as_dict()["field"] == "metadata.deletionTimestamp"  # as Git shows it


def test_held_keeps_its_transition_time_and_gits_copy_has_none() -> None:
    _, live = held_view()
    copy = {"metadata": {}, "status": {}}
    first = app_status(AppStatusInputs(live, copy, "2026-01-01T00:00:00Z", held="held"))
    assert first is not None
    again = AppStatusInputs({**live, "status": first}, copy, "2026-02-02T00:00:00Z", held="held")
    assert app_status(again) is None  # the same, its time kept: nothing to write
    gits = git_status({}, "held")
    assert gits is not None
    assert "lastTransitionTime" not in gits["conditions"][0]
