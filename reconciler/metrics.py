"""Prometheus metrics of the reconciler, in one registry so tests can read them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

RECONCILE_SECONDS = Histogram(
    "klutch_gitops_reconcile_duration_seconds",
    "Duration of one sync pass of a repository",
    ["repository"],
    registry=REGISTRY,
)
FETCH_SECONDS = Histogram(
    "klutch_gitops_fetch_duration_seconds",
    "Duration of a git fetch",
    ["repository"],
    registry=REGISTRY,
)
WRITE_BACK_SECONDS = Histogram(
    "klutch_gitops_write_back_duration_seconds",
    "Duration of a status write-back",
    ["repository"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge("klutch_gitops_queue_depth", "Work items waiting", registry=REGISTRY)
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
    "klutch_gitops_rejected_documents", "Documents refused", ["repository"], registry=REGISTRY
)
BINDER_TOKEN_EXPIRY = Gauge(
    "klutch_gitops_binder_token_expiry_timestamp_seconds",
    "When the token in a binder kubeconfig Secret expires; alert when it nears: renewal fails",
    ["secret"],
    registry=REGISTRY,
)
