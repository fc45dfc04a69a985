"""A cold sync's fixed costs beside the loading of desired state, and both clusters written at
once (issue 17), against the in-memory view of the stages' tests (FakeView)."""

from __future__ import annotations

import threading

import pytest

from klutch_gitops.kube.client import KubeError, Resource
from reconciler.sync import apply, events
from reconciler.sync.apply import Source, apply_claims
from reconciler.sync.namespaces import map_namespaces
from reconciler.sync.prepare import preparing
from tests.unit.reconciler.sync.fakeview import FakeView
from tests.unit.reconciler.sync.test_sync_stages import (
    APP_NS,
    CP_NS,
    EXPORT,
    claim,
    mapped_view,
    raw_export,
)

SOURCE = Source("team-repo", "claims", "c1", external=False)
GATE_SECONDS = 10.0  # a gate not opened by then means the behaviour under test is missing


class AnsweringView(FakeView):
    """A namespace controller answers the mapping request after ``answer_after`` reads."""

    def __init__(self, answer_after: int | None) -> None:
        super().__init__([EXPORT])
        self.answer_after = answer_after
        self.reads = 0

    def namespace_mapping(self, namespace: str) -> dict | None:
        self.reads += 1
        mapping = super().namespace_mapping(namespace)
        answered = self.answer_after is not None and self.reads > self.answer_after
        if mapping is not None and answered:
            mapping["status"] = {"namespace": CP_NS}
        return mapping


# -- the namespace mapping, waited for --------------------------------------------------------


def test_a_mapping_asked_for_is_waited_for_within_the_pass() -> None:
    view = AnsweringView(answer_after=3)
    assert map_namespaces(view, (APP_NS,), wait=GATE_SECONDS) is False
    assert view.mapping == {APP_NS: CP_NS}
    assert view.writes == [("apply", "cp", "APIServiceNamespace", "consumer", APP_NS)]
    assert "mapped claims" in view.watched


def test_an_unanswered_mapping_is_pending_after_the_wait() -> None:
    view = AnsweringView(answer_after=None)
    assert map_namespaces(view, (APP_NS,), wait=0.2) is True
    assert view.mapping == {}
    assert view.reads > 1  # looked again, then gave up


def test_a_mapping_asked_for_earlier_is_not_waited_for_again() -> None:
    """A controller that does not answer must not cost every pass the wait."""
    view = AnsweringView(answer_after=None)
    view.namespace_mappings[APP_NS] = {"metadata": {"name": APP_NS}}
    assert map_namespaces(view, (APP_NS,), wait=GATE_SECONDS) is True
    assert view.reads == 1
    assert view.writes == []


# -- preparing beside the load ----------------------------------------------------------------


class GatedView(AnsweringView):
    """``serve_crd`` returns only once the caller's block has started (the load)."""

    def __init__(self) -> None:
        super().__init__(answer_after=0)
        self.loading = threading.Event()

    def serve_crd(self, crd: dict) -> None:
        if not self.loading.wait(GATE_SECONDS):
            raise AssertionError("the CRDs were served before desired state started loading")
        super().serve_crd(crd)


def test_kinds_and_mappings_are_prepared_while_desired_state_loads() -> None:
    view = GatedView()
    with preparing(view, [raw_export()], "claims", "consumer", (APP_NS,)) as prepared:
        view.loading.set()  # the load runs here, in the pass's thread
    verdicts, problems, pending = prepared.result()
    assert problems == []
    assert pending is False
    assert EXPORT.name in verdicts
    assert ("apply", "app", "CustomResourceDefinition", "", EXPORT.name) in view.writes
    assert view.mapping == {APP_NS: CP_NS}


def test_an_error_while_preparing_is_the_passes_and_nothing_outlives_it() -> None:
    view = GatedView()
    view.refuse[("apply", "cp", APP_NS)] = KubeError(403, "Forbidden", "no")
    with preparing(view, [raw_export()], "claims", "consumer", (APP_NS,)) as prepared:
        view.loading.set()
    assert prepared.done()  # leaving the block waited for it
    with pytest.raises(KubeError):
        prepared.result()


def failed_load(view: GatedView) -> None:
    with preparing(view, [raw_export()], "claims", "consumer", (APP_NS,)):
        view.loading.set()
        raise ValueError("a claim file did not load")


def test_a_failed_load_still_waits_for_the_preparation() -> None:
    view = GatedView()
    with pytest.raises(ValueError, match="did not load"):
        failed_load(view)
    assert view.mapping == {APP_NS: CP_NS}  # done before the error left the pass


# -- both clusters at once ----------------------------------------------------------------------


class PipelineView(FakeView):
    """Records the order of writes and how many run at once per cluster; Control Plane writes
    wait until every App write has returned, which only a writer with a pool per cluster lets
    happen (one pool doing App then Control Plane per claim would wait here forever)."""

    def __init__(self, claims: int) -> None:
        super().__init__([EXPORT])
        self.mapping[APP_NS] = CP_NS
        self.claims = claims
        self.lock = threading.Lock()
        self.order: list[tuple[str, str]] = []
        self.inflight = {"app": 0, "cp": 0}
        self.most = {"app": 0, "cp": 0}
        self.apps_done = threading.Event()

    def _enter(self, cluster: str) -> None:
        with self.lock:
            self.inflight[cluster] += 1
            self.most[cluster] = max(self.most[cluster], self.inflight[cluster])

    def _leave(self, cluster: str, name: str) -> None:
        with self.lock:
            self.inflight[cluster] -= 1
            self.order.append((cluster, name))
            if sum(1 for c, _ in self.order if c == "app") == self.claims:
                self.apps_done.set()

    def apply_app(
        self, resource: Resource, body: dict, *, force: bool = False, status: bool = False
    ) -> dict:
        self._enter("app")
        try:
            with self.lock:
                return super().apply_app(resource, body, force=force, status=status)
        finally:
            self._leave("app", body["metadata"]["name"])

    def apply_cp(self, resource: Resource, body: dict) -> None:
        self._enter("cp")
        try:
            if not self.apps_done.wait(GATE_SECONDS):
                raise AssertionError("Control Plane writes held back the App Cluster's")
            with self.lock:
                super().apply_cp(resource, body)
        finally:
            self._leave("cp", body["metadata"]["name"])


def test_both_clusters_are_written_at_once_each_within_its_limit() -> None:
    n = 3 * apply.APPLY_CONCURRENCY
    view = PipelineView(n)
    claims = tuple(claim(f"db-{i:02d}") for i in range(n))
    assert apply_claims(view, claims, SOURCE) == []
    assert len(view.order) == 2 * n
    assert view.most["app"] <= apply.APPLY_CONCURRENCY
    assert view.most["cp"] <= apply.APPLY_CONCURRENCY
    assert view.most["cp"] > 1  # the Control Plane writes ran side by side too
    for c in claims:  # a copy only after its App object, and its Event on that object
        name = c.identity.name
        assert view.order.index(("app", name)) < view.order.index(("cp", name))
    assert sorted(e[0] for e in view.normal_events if e[1] == events.APPLIED) == sorted(
        c.identity.name for c in claims
    )


def test_a_refused_app_write_gets_no_control_plane_copy() -> None:
    view = mapped_view()
    view.refuse[("apply", "app", "db-01")] = KubeError(422, "Invalid", "spec.plan: bad")
    claims = tuple(claim(f"db-{i:02d}") for i in range(4))
    [problem] = apply_claims(view, claims, SOURCE)
    assert problem.identity == claims[1].identity
    assert "App Cluster refused" in problem.message
    copies = {name for _, cluster, _, _, name in view.writes if cluster == "cp"}
    assert copies == {"db-00", "db-02", "db-03"}


def test_a_refused_copy_is_reported_and_the_others_are_written() -> None:
    view = mapped_view()
    view.refuse[("apply", "cp", "db-02")] = KubeError(403, "Forbidden", "not allowed")
    claims = tuple(claim(f"db-{i:02d}") for i in range(4))
    [problem] = apply_claims(view, claims, SOURCE)
    assert problem.identity == claims[2].identity
    assert "Control Plane refused" in problem.message
    assert len([w for w in view.writes if w[1] == "app"]) == 4
    assert len([w for w in view.writes if w[1] == "cp"]) == 3
