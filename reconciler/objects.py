"""Pure decisions of the sync stages: what each copy of a claim should look like.

Git → App Cluster (our labels, annotations, finalizer) → Control Plane (mapped namespace, without
App-side bookkeeping) → status and provider-owned Secrets back to the App Cluster. Nothing here
does I/O, so every rule is unit-tested on plain dicts.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from klutch_gitops.crds import version_snapshot
from klutch_gitops.manifests import Claim, Identity

PREFIX = "gitops.klutch.anynines.com"
REPOSITORY_LABEL = f"{PREFIX}/repository"
PATH_ANNOTATION = f"{PREFIX}/path"
FILE_ANNOTATION = f"{PREFIX}/file"
COMMIT_ANNOTATION = f"{PREFIX}/commit"
SPEC_HASH_ANNOTATION = f"{PREFIX}/spec-hash"
DELETION_PROTECTION = f"{PREFIX}/deletion-protection"
FINALIZER = "klutch.anynines.com/syncer"
BOUND_ANNOTATION = "klutch.anynines.com/bound"
RESOURCE_OWNER = "klutch.anynines.com/resource-owner"
CREDENTIALS_SUFFIX = "-creds"

# Bookkeeping of other tools that must never reach the Control Plane copy.
FOREIGN_BOOKKEEPING = (
    "argocd.argoproj.io/",
    "kustomize.toolkit.fluxcd.io/",
    "kubectl.kubernetes.io/last-applied-configuration",
    f"{PREFIX}/",
)


def spec_hash(claim: Claim) -> str:
    """A digest of what Git says about the claim; changes only when its content does."""
    canonical = json.dumps(claim.body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def app_object(
    claim: Claim, repository: str, path: str, commit: str, live: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The App Cluster copy: Git's document plus what records where it came from.

    The commit annotation names the commit that last changed this claim, not the newest commit:
    a status-only commit then changes nothing in the cluster, so write-back cannot loop.
    """
    digest = spec_hash(claim)
    live_annotations = ((live or {}).get("metadata") or {}).get("annotations") or {}
    if (
        live_annotations.get(SPEC_HASH_ANNOTATION) == digest
        and COMMIT_ANNOTATION in live_annotations
    ):
        commit = live_annotations[COMMIT_ANNOTATION]
    body = copy.deepcopy(dict(claim.body))
    meta = body.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), REPOSITORY_LABEL: repository}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        PATH_ANNOTATION: path,
        FILE_ANNOTATION: claim.location.file,
        COMMIT_ANNOTATION: commit,
        SPEC_HASH_ANNOTATION: digest,
    }
    meta["finalizers"] = [FINALIZER]
    return body


def control_plane_object(claim: Claim, namespace: str) -> dict[str, Any]:
    """The Control Plane copy in the mapped namespace: spec and the person's own metadata."""
    body = copy.deepcopy(dict(claim.body))
    meta = body.get("metadata") or {}
    body["metadata"] = {
        "name": meta["name"],
        "namespace": namespace,
        "annotations": {**_own(meta.get("annotations")), BOUND_ANNOTATION: "true"},
    }
    if labels := _own(meta.get("labels")):
        body["metadata"]["labels"] = labels
    return body


def _own(values: Mapping[str, str] | None) -> dict[str, str]:
    return {
        k: v
        for k, v in (values or {}).items()
        if not any(k.startswith(prefix) for prefix in FOREIGN_BOOKKEEPING)
    }


def needs_apply(desired: Mapping[str, Any], live: Mapping[str, Any] | None) -> bool:
    """Whether ``live`` lacks anything ``desired`` sets (defaults the server adds are fine)."""
    if live is None or (live.get("metadata") or {}).get("deletionTimestamp"):
        return live is None
    return not _subset(desired, live)


def _subset(want: Any, have: Any) -> bool:
    if isinstance(want, Mapping):
        # the API server drops empty maps and lists: a missing key equals an empty value
        return isinstance(have, Mapping) and all(
            _subset(value, have[key]) if key in have else value in ({}, [])
            for key, value in want.items()
        )
    if isinstance(want, list):
        return (
            isinstance(have, list)
            and len(want) == len(have)
            and all(_subset(w, h) for w, h in zip(want, have, strict=True))
        )
    return want == have


def status_object(live_app: Mapping[str, Any], upstream: Mapping[str, Any]) -> dict | None:
    """The status-subresource apply that copies the Control Plane's ``.status``; None if equal."""
    status = upstream.get("status")
    if status is None or live_app.get("status") == status:
        return None
    meta = live_app["metadata"]
    return {
        "apiVersion": live_app["apiVersion"],
        "kind": live_app["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": copy.deepcopy(status),
    }


def credential_secret_names(claim_body: Mapping[str, Any]) -> set[str]:
    """Secrets the provider writes for a claim: its connection secret and ``<name>-creds``."""
    spec = claim_body.get("spec") or {}
    names = set()
    ref = spec.get("writeConnectionSecretToRef") or {}
    if ref.get("name"):
        names.add(ref["name"])
    if claim_body.get("kind") == "ServiceBinding":
        names.add(claim_body["metadata"]["name"] + CREDENTIALS_SUFFIX)
    return names


def secret_copy(
    upstream: Mapping[str, Any], namespace: str, repository: str, owner: Mapping[str, Any]
) -> dict[str, Any]:
    """The App Cluster copy of a provider-owned Secret, owned by (and deleted with) its claim."""
    meta = upstream["metadata"]
    owner_meta = owner["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": upstream.get("type", "Opaque"),
        "metadata": {
            "name": meta["name"],
            "namespace": namespace,
            "labels": {REPOSITORY_LABEL: repository},
            "annotations": {RESOURCE_OWNER: "Provider"},
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner_meta["name"],
                    "uid": owner_meta["uid"],
                }
            ],
        },
        "data": dict(upstream.get("data") or {}),
    }


def within(file: str, held: str) -> bool:
    """Whether ``file`` is ``held`` or lies under it ("" and "." hold everything)."""
    held = held.strip("/")
    return held in ("", ".") or file == held or file.startswith(held + "/")


def deletion_protected(live: Mapping[str, Any]) -> bool:
    annotations = (live.get("metadata") or {}).get("annotations") or {}
    return annotations.get(DELETION_PROTECTION) == "true"


def to_prune(live: Iterable[Mapping[str, Any]], desired: set[Identity]) -> list[Mapping[str, Any]]:
    """Our App objects that Git no longer has (not already being deleted)."""
    return [
        obj
        for obj in live
        if Identity.of(obj) not in desired and not obj["metadata"].get("deletionTimestamp")
    ]


def crd_from_export(export: Mapping[str, Any]) -> dict[str, Any]:
    """The App Cluster CRD for an APIServiceExport (a CRD snapshot), marked as ours."""
    spec = export["spec"]
    versions = []
    for version in spec.get("versions") or []:
        entry = version_snapshot(version)
        entry.setdefault("subresources", {"status": {}})
        versions.append(entry)
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": export["metadata"]["name"],
            "labels": {"app.kubernetes.io/managed-by": "klutch-gitops"},
            "annotations": {BOUND_ANNOTATION: "true"},
        },
        "spec": {
            "group": spec["group"],
            "names": spec["names"],
            "scope": spec.get("scope", "Namespaced"),
            "versions": versions,
        },
    }


def owns_crd(crd: Mapping[str, Any] | None) -> bool:
    """A CRD we may update: absent, or created by us (never take over a foreign CRD)."""
    if crd is None:
        return True
    labels = crd["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/managed-by") == "klutch-gitops"
