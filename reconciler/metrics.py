"""Prometheus metrics of the reconciler, in one registry so tests can read them.

Metrics are recorded under registration and Secret names, which carry consumer namespaces: tenant
names. :func:`exposition` gives them only to a scrape that presents the reconciler's metrics token;
any other scrape gets each such label value replaced by a stable hash of it (:func:`label_hash`),
so dashboards and alerts still tell registrations apart and nobody on the port learns a name.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import platform
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.metrics_core import Metric
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from reconciler.work import Work


def _version() -> str:
    try:
        return version("klutch-gitops")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown"


REGISTRY = CollectorRegistry()
# process_* (CPU, memory, file descriptors), python_info and python_gc_*, as on the default registry
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

# Passes, fetches and write-backs of big repositories on slow forges take minutes, not seconds.
BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)

RECONCILE_SECONDS = Histogram(
    "klutch_gitops_reconcile_duration_seconds",
    "Duration of one sync pass of a repository",
    ["repository"],
    buckets=BUCKETS,
    registry=REGISTRY,
)
FETCH_SECONDS = Histogram(
    "klutch_gitops_fetch_duration_seconds",
    "Duration of a git fetch",
    ["repository"],
    buckets=BUCKETS,
    registry=REGISTRY,
)
WRITE_BACK_SECONDS = Histogram(
    "klutch_gitops_write_back_duration_seconds",
    "Duration of a status write-back",
    ["repository"],
    buckets=BUCKETS,
    registry=REGISTRY,
)
# errors_total's reason is the error's class (GitFailed, KubeError, ...), which a failed fetch and
# a failed push share: the write-back alert needs the stage.
WRITE_BACK_FAILURES = Counter(
    "klutch_gitops_write_back_failures_total",
    "Status write-backs that failed (push refused, remote unreachable); retried with back-off",
    ["repository"],
    registry=REGISTRY,
)
COMMITS = Counter(
    "klutch_gitops_status_commits_total", "Status commits pushed", ["repository"], registry=REGISTRY
)
ERRORS = Counter(
    "klutch_gitops_errors_total",
    "Failed passes and rejected inputs",
    ["repository", "reason"],
    registry=REGISTRY,
)
CLAIMS = Gauge(
    "klutch_gitops_claims", "Claims accepted from Git", ["repository"], registry=REGISTRY
)
REJECTED = Gauge(
    "klutch_gitops_rejected_documents",
    "Documents refused by the last pass (a document with several problems counts once)",
    ["repository"],
    registry=REGISTRY,
)
CONDITION = Gauge(
    "klutch_gitops_reconcile_condition",
    "1 for the status a registration's condition has, 0 for the others (Flux's "
    "gotk_reconcile_condition)",
    ["repository", "type", "status"],
    registry=REGISTRY,
)
SUSPENDED = Gauge(
    "klutch_gitops_suspended",
    "1 while a registration is suspended",
    ["repository"],
    registry=REGISTRY,
)
LAST_SUCCESS = Gauge(
    "klutch_gitops_last_successful_reconcile_timestamp_seconds",
    "When a registration's last pass completed without error (Unix time)",
    ["repository"],
    registry=REGISTRY,
)
BUILD = Info("klutch_gitops_build", "The running reconciler's version", registry=REGISTRY)
BUILD.info({"version": _version(), "python": platform.python_version()})

# client-go's workqueue metrics, under client-go's names, so existing dashboards read them.
QUEUE_DEPTH = Gauge("workqueue_depth", "Keys waiting", ["name"], registry=REGISTRY)
QUEUE_ADDS = Counter("workqueue_adds_total", "Keys added", ["name"], registry=REGISTRY)
QUEUE_WAIT = Histogram(
    "workqueue_queue_duration_seconds",
    "How long a key waits before a worker takes it",
    ["name"],
    buckets=BUCKETS,
    registry=REGISTRY,
)
QUEUE_WORK = Histogram(
    "workqueue_work_duration_seconds",
    "How long handling a key takes",
    ["name"],
    buckets=BUCKETS,
    registry=REGISTRY,
)
QUEUE_RETRIES = Counter(
    "workqueue_retries_total", "Keys retried after a failure", ["name"], registry=REGISTRY
)
QUEUE_UNFINISHED = Gauge(
    "workqueue_unfinished_work_seconds",
    "Seconds of work in progress not yet in work_duration; steady growth means stuck workers",
    ["name"],
    registry=REGISTRY,
)
QUEUE_LONGEST = Gauge(
    "workqueue_longest_running_processor_seconds",
    "How long the longest-running key in progress has been handled",
    ["name"],
    registry=REGISTRY,
)
STATUSES = ("True", "False", "Unknown")
PER_REPOSITORY = (
    RECONCILE_SECONDS,
    FETCH_SECONDS,
    WRITE_BACK_SECONDS,
    WRITE_BACK_FAILURES,
    COMMITS,
    CLAIMS,
    REJECTED,
    SUSPENDED,
    LAST_SUCCESS,
)
BINDER_TOKEN_EXPIRY = Gauge(
    "klutch_gitops_binder_token_expiry_timestamp_seconds",
    "When the token in a binder kubeconfig Secret expires; alert when it nears: renewal fails",
    ["secret"],
    registry=REGISTRY,
)


class QueueMetrics:
    """A work queue's observer (``klutch_gitops.kube.workqueue.QueueObserver``).

    The two in-progress gauges are computed when scraped, from the keys being handled, where
    client-go's queue recomputes them every half second.
    """

    def __init__(self, name: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.depth = QUEUE_DEPTH.labels(name)
        self.adds = QUEUE_ADDS.labels(name)
        self.wait = QUEUE_WAIT.labels(name)
        self.work = QUEUE_WORK.labels(name)
        self.retries = QUEUE_RETRIES.labels(name)
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[Hashable, float] = {}  # key -> when a worker took it
        QUEUE_UNFINISHED.labels(name).set_function(lambda: sum(self._ages(), 0.0))
        QUEUE_LONGEST.labels(name).set_function(lambda: max(self._ages(), default=0.0))

    def _ages(self) -> list[float]:
        now = self._clock()
        with self._lock:
            return [now - since for since in self._running.values()]

    def added(self, depth: int) -> None:
        self.adds.inc()
        self.depth.set(depth)

    def started(self, key: Hashable, waited: float, depth: int) -> None:
        self.wait.observe(waited)
        self.depth.set(depth)
        with self._lock:
            self._running[key] = self._clock()

    def finished(self, key: Hashable) -> None:
        with self._lock:
            since = self._running.pop(key, None)
        if since is not None:
            self.work.observe(self._clock() - since)

    def retried(self) -> None:
        self.retries.inc()


def observe_status(
    repository: str, conditions: Iterable[Mapping[str, str]], suspended: bool
) -> None:
    """A registration's conditions and whether it is suspended, as gauges."""
    SUSPENDED.labels(repository).set(1 if suspended else 0)
    for found in conditions:
        for status in STATUSES:
            CONDITION.labels(repository, found["type"], status).set(
                1 if found.get("status") == status else 0
            )


def failed(repository: str, work: Work, reason: str) -> None:
    """A work item of registration ``repository`` failed: ``reason`` is the error's class or
    ``internal``."""
    ERRORS.labels(repository, reason).inc()
    if work == Work.WRITEBACK:
        WRITE_BACK_FAILURES.labels(repository).inc()


def pass_succeeded(repository: str, at: float | None = None) -> None:
    LAST_SUCCESS.labels(repository).set(time.time() if at is None else at)


def forget(repository: str) -> None:
    """Drop a registration that went away from every per-repository metric."""
    for metric in (*PER_REPOSITORY, CONDITION, ERRORS):
        for labels in {tuple(s.labels.items()) for m in metric.collect() for s in m.samples}:
            found = dict(labels)
            if found.get("repository") == repository:
                with contextlib.suppress(KeyError):
                    metric.remove(*(found[name] for name in metric._labelnames))


# The labels that name tenants: registrations (consumer namespace and binding) and Secrets.
NAME_LABELS = frozenset({"repository", "secret"})


def label_hash(value: str) -> str:
    """The label value an anonymous scrape sees: ``sha256:`` and 16 hex digits of the name's
    SHA-256 (``printf %s NAME | sha256sum | cut -c1-16`` finds a registration's)."""
    return "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:16]


class _Hashed:
    """REGISTRY, with the values of NAME_LABELS hashed."""

    def collect(self) -> Iterator[Metric]:
        for metric in REGISTRY.collect():
            hashed = copy.copy(metric)
            hashed.samples = [
                sample._replace(
                    labels={
                        key: label_hash(value) if key in NAME_LABELS else value
                        for key, value in sample.labels.items()
                    }
                )
                for sample in metric.samples
            ]
            yield hashed


def exposition(names: bool) -> bytes:
    """The text exposition: with the names when ``names``, hashed otherwise."""
    return generate_latest(REGISTRY if names else _Hashed())
