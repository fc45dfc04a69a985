"""The App claims on the App Cluster: every served kind outside Kubernetes' own groups, listed by
the repository label the reconciler puts on each claim it writes (reconciler/sync/objects.py)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from klutch_gitops.apis import REPOSITORY_LABEL
from klutch_gitops.inspect.table import age, short
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.conditions import by_type

HEADERS = ["KIND", "NAME", "READY", "SYNCED", "REASON", "REPOSITORY", "AGE"]
REASON_WIDTH = 100
_BUILTIN = {"apps", "batch", "autoscaling", "policy", "apiregistration.k8s.io"}


def claim_kinds(kube: Kube) -> list[Resource]:
    """Namespaced, listable kinds of the served groups that are not Kubernetes' own."""
    try:
        groups = client.ApisApi(kube.api).get_api_versions(_request_timeout=kube.timeout).groups
    except ApiException as error:
        raise KubeError.of(error) from None
    kinds = []
    for group in groups:
        if group.name in _BUILTIN or group.name.endswith(".k8s.io"):
            continue
        assert group.preferred_version is not None  # discovery names one for every group
        version = group.preferred_version.version
        try:
            found = client.CustomObjectsApi(kube.api).get_api_resources(group.name, version)
        except ApiException as error:
            if error.status in (403, 404, 503):  # an aggregated API that is down: not ours
                continue
            raise KubeError.of(error) from None
        kinds += [
            Resource(group.name, version, r.name, r.kind)
            for r in found.resources
            if r.namespaced and "/" not in r.name and "list" in (r.verbs or [])
        ]
    return kinds


def list_claims(
    kube: Kube, namespace: str | None
) -> tuple[list[dict[str, Any]], dict[Resource, str]]:
    """Every object with the repository label, in ``namespace`` or all, sorted like kubectl; and
    each listed kind's resourceVersion, where a watch of it starts."""
    claims = []
    versions: dict[Resource, str] = {}
    denied: KubeError | None = None
    for kind in claim_kinds(kube):
        try:
            items, versions[kind] = kube.list(kind, namespace, label_selector=REPOSITORY_LABEL)
        except KubeError as error:
            if error.status in (401, 403):
                denied = error
                continue
            if error.status in (404, 405):
                continue
            raise
        claims += [{"apiVersion": kind.api_version, "kind": kind.kind, **item} for item in items]
    if denied is not None and not claims:
        raise denied
    return sorted(claims, key=_order), versions


def _order(obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return meta.get("namespace", ""), obj.get("kind", ""), meta["name"]


def headers(all_namespaces: bool) -> list[str]:
    return [*(["NAMESPACE"] if all_namespaces else []), *HEADERS]


def row(obj: Mapping[str, Any], all_namespaces: bool, now: dt.datetime | None = None) -> list[str]:
    """One claim: its Ready and Synced (Crossplane's conditions) and why one is not True."""
    meta = obj["metadata"]
    conditions = by_type(obj.get("status"))
    ready, synced = conditions.get("Ready") or {}, conditions.get("Synced") or {}
    cells = [
        obj.get("kind", ""),
        meta["name"],
        ready.get("status", ""),
        synced.get("status", ""),
        short(reason(conditions), REASON_WIDTH),
        (meta.get("labels") or {}).get(REPOSITORY_LABEL, ""),
        age(meta.get("creationTimestamp"), now),
    ]
    return [meta.get("namespace", ""), *cells] if all_namespaces else cells


def reason(conditions: Mapping[str, Mapping[str, Any]]) -> str:
    """``Reason: message`` of the first of Synced, Ready that is not True (Synced first: a
    refused change is why a claim stays on its old spec)."""
    for kind in ("Synced", "Ready"):
        found = conditions.get(kind)
        if found and found.get("status") != "True":
            text = found.get("reason", "")
            return f"{text}: {found['message']}" if found.get("message") else text
    return ""
