"""Prometheus metrics of the reconciler, in one registry so tests can read them.

Metrics are recorded under registration and Secret names, which carry consumer namespaces: tenant
names. :func:`exposition` gives them only to a scrape that presents the reconciler's metrics token;
any other scrape gets each such label value replaced by a stable hash of it (:func:`label_hash`),
so dashboards and alerts still tell registrations apart and nobody on the port learns a name.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics_core import Metric

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
    return generate_latest(REGISTRY if names else _Hashed())  # type: ignore[arg-type]
