"""The reconciler's metrics: the work queue's, the registrations' status gauges, forgetting a
registration, hashed names and the process collectors, read back from the real registry."""

from __future__ import annotations

import re
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from klutch_gitops.kube.workqueue import WorkQueue
from reconciler import metrics
from reconciler.metrics import REGISTRY, QueueMetrics, exposition, label_hash
from reconciler.work import Work

# client-go's workqueue metrics, subsystem "workqueue", one label "name": kubernetes/kubernetes
# staging/src/k8s.io/component-base/metrics/prometheus/workqueue/metrics.go (DepthKey, AddsKey,
# QueueLatencyKey, WorkDurationKey, UnfinishedWorkKey, LongestRunningProcessorKey, RetriesKey).
CLIENT_GO_WORKQUEUE = {
    "workqueue_depth": "gauge",
    "workqueue_adds": "counter",
    "workqueue_queue_duration_seconds": "histogram",
    "workqueue_work_duration_seconds": "histogram",
    "workqueue_unfinished_work_seconds": "gauge",
    "workqueue_longest_running_processor_seconds": "gauge",
    "workqueue_retries": "counter",
}


def value(metric: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(metric, labels)


def repository() -> str:
    """A registration name no other test uses: the registry is the process's one."""
    return f"ns-{uuid.uuid4().hex[:8]}/binding"


def families(text: bytes) -> dict[str, tuple[str, list]]:
    return {
        family.name: (family.type, family.samples)
        for family in text_string_to_metric_families(text.decode())
    }


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_workqueue_metrics_have_client_gos_names_types_and_label() -> None:
    found = families(exposition(names=True))
    for name, kind in CLIENT_GO_WORKQUEUE.items():
        assert found[name][0] == kind, name
    QueueMetrics(f"q-{uuid.uuid4().hex[:6]}")  # a child, so every family has samples
    for name in CLIENT_GO_WORKQUEUE:
        samples = families(exposition(names=True))[name][1]
        assert samples, name
        assert all("name" in s.labels for s in samples), name


def test_a_real_queue_counts_adds_waits_work_retries_and_work_in_progress() -> None:
    name = f"q-{uuid.uuid4().hex[:6]}"
    clock = Clock()
    queue: WorkQueue[str] = WorkQueue(base_delay=0.001, observer=QueueMetrics(name, clock))
    queue.add("a")
    queue.add("a")  # waiting already: not added twice
    queue.add("b")
    assert value("workqueue_adds_total", name=name) == 2
    assert value("workqueue_depth", name=name) == 2

    assert queue.get(timeout=1) == "a"
    clock.now = 101.0
    assert queue.get(timeout=1) == "b"
    assert value("workqueue_depth", name=name) == 0
    assert value("workqueue_queue_duration_seconds_count", name=name) == 2
    clock.now = 104.0  # a ran 4 s so far, b 3 s
    assert value("workqueue_longest_running_processor_seconds", name=name) == 4.0
    assert value("workqueue_unfinished_work_seconds", name=name) == 7.0

    queue.add_rate_limited("a")  # a failed
    queue.done("a")
    queue.done("b")
    assert value("workqueue_retries_total", name=name) == 1
    assert value("workqueue_work_duration_seconds_count", name=name) == 2
    assert value("workqueue_longest_running_processor_seconds", name=name) == 0.0
    assert value("workqueue_unfinished_work_seconds", name=name) == 0.0
    assert queue.get(timeout=1) == "a"  # the retry came back after its back-off
    assert value("workqueue_adds_total", name=name) == 3


def test_each_condition_type_has_one_status_at_1() -> None:
    """Flux's gotk_reconcile_condition: one series per status, 1 for the one the condition has
    (fluxcd/pkg runtime/metrics/recorder.go, RecordCondition; Flux adds a "Deleted" status where
    forget removes the series instead)."""
    name = repository()
    conditions = [
        {"type": "Ready", "status": "False"},
        {"type": "Reconciling", "status": "True"},
        {"type": "Stalled", "status": "Unknown"},
    ]
    metrics.observe_status(name, conditions, suspended=True)
    for condition in conditions:
        statuses = {
            status: value(
                "klutch_gitops_reconcile_condition",
                repository=name,
                type=condition["type"],
                status=status,
            )
            for status in metrics.STATUSES
        }
        assert statuses == {s: float(s == condition["status"]) for s in metrics.STATUSES}
    assert value("klutch_gitops_suspended", repository=name) == 1
    metrics.observe_status(name, [{"type": "Ready", "status": "True"}], suspended=False)
    assert value("klutch_gitops_suspended", repository=name) == 0
    assert value("klutch_gitops_reconcile_condition", repository=name, type="Ready", status="True")
    assert not value(
        "klutch_gitops_reconcile_condition", repository=name, type="Ready", status="False"
    )


def record_everything(name: str) -> None:
    """One sample of every per-repository metric for ``name``."""
    for histogram in (
        metrics.RECONCILE_SECONDS,
        metrics.FETCH_SECONDS,
        metrics.WRITE_BACK_SECONDS,
    ):
        histogram.labels(name).observe(1.0)
    metrics.COMMITS.labels(name).inc()
    metrics.CLAIMS.labels(name).set(3)
    metrics.REJECTED.labels(name).set(1)
    metrics.failed(name, Work.WRITEBACK, "GitFailed")
    metrics.failed(name, Work.SYNC, "internal")
    metrics.observe_status(name, [{"type": "Ready", "status": "True"}], suspended=False)
    metrics.pass_succeeded(name, at=1_700_000_000.0)


def series_of(name: str, text: bytes) -> list[str]:
    return [line for line in text.decode().splitlines() if f'"{name}"' in line]


def test_failures_count_by_reason_and_write_backs_by_stage() -> None:
    name = repository()
    record_everything(name)
    assert value("klutch_gitops_errors_total", repository=name, reason="GitFailed") == 1
    assert value("klutch_gitops_errors_total", repository=name, reason="internal") == 1
    assert value("klutch_gitops_write_back_failures_total", repository=name) == 1
    assert value("klutch_gitops_last_successful_reconcile_timestamp_seconds", repository=name) == (
        1_700_000_000.0
    )


def test_forget_leaves_no_sample_of_the_repository() -> None:
    gone, kept = repository(), repository()
    record_everything(gone)
    record_everything(kept)
    before = series_of(gone, exposition(names=True))
    # every per-repository family had a sample, so forgetting is checked on each of them
    recorded = {re.sub(r"(_bucket|_count|_sum|_total|_created)?\{.*", "", s) for s in before}
    per_repository = {m._name for m in (*metrics.PER_REPOSITORY, metrics.CONDITION)}
    assert per_repository | {"klutch_gitops_errors"} <= recorded

    metrics.forget(gone)

    text = exposition(names=True)
    assert series_of(gone, text) == []
    assert len(series_of(kept, text)) == len(before)


@pytest.mark.parametrize("hashed", ["repository", "secret"])
def test_anonymous_scrapes_see_every_name_label_hashed(hashed: str) -> None:
    name = repository()
    record_everything(name)
    metrics.BINDER_TOKEN_EXPIRY.labels(name).set(1_700_000_000)
    anonymous = exposition(names=False).decode()
    assert name not in anonymous
    digest = label_hash(name)
    samples = [
        sample
        for family in text_string_to_metric_families(anonymous)
        for sample in family.samples
        if sample.labels.get(hashed) == digest
    ]
    assert samples, f"no sample with {hashed}={digest}"
    if hashed == "repository":
        names = {sample.name for sample in samples}
        assert {
            "klutch_gitops_reconcile_condition",
            "klutch_gitops_suspended",
            "klutch_gitops_last_successful_reconcile_timestamp_seconds",
            "klutch_gitops_write_back_failures_total",
        } <= names
    metrics.forget(name)
    metrics.BINDER_TOKEN_EXPIRY.remove(name)


def test_the_exposition_has_process_python_and_build_info() -> None:
    found = families(exposition(names=False))
    for name in (
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "python_info",
        "python_gc_objects_collected",
    ):
        assert name in found, name
    (build,) = found["klutch_gitops_build_info"][1]
    assert build.value == 1
    assert set(build.labels) == {"version", "python"}
    assert all(build.labels.values())
