"""Warning Events: where ``kubectl describe`` shows what the reconciler refused or could not do."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from klutch_gitops.kube.client import Resource


def warning_event(
    resource: Resource, obj: Mapping[str, Any], reason: str, message: str
) -> dict[str, Any]:
    """A Warning Event about ``obj``, where `kubectl describe` shows it."""
    meta = obj["metadata"]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": "Warning",
        "reason": reason,
        "message": message[:1024],
        "source": {"component": "klutch-gitops"},
        "metadata": {
            "namespace": meta["namespace"],
            "generateName": f"{meta['name']}.klutch-gitops.",
        },
        "involvedObject": {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
