"""Pure decisions of the sync stages: what each copy of a claim should look like.

Git → App Cluster (our labels, annotations, finalizer) → Control Plane (mapped namespace, without
App-side bookkeeping) → status and provider-owned Secrets back to the App Cluster. With
``appSync: external`` Argo CD or Flux writes the App copy; we add only our label and finalizer and
mirror what they applied. Nothing here does I/O, so every rule is unit-tested on plain dicts.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from klutch_gitops.apis import DELETION_PROTECTION, REPOSITORY_LABEL
from reconciler.manifests import Claim, Identity

PREFIX = "gitops.klutch.anynines.com"
PATH_ANNOTATION = f"{PREFIX}/path"
FILE_ANNOTATION = f"{PREFIX}/file"
COMMIT_ANNOTATION = f"{PREFIX}/commit"
SPEC_HASH_ANNOTATION = f"{PREFIX}/spec-hash"
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
ARGOCD_MANAGER = "argocd-controller"
# Argo CD's label tracking key: on the Control Plane it would tie the copy to an Application there.
ARGOCD_INSTANCE_LABEL = "app.kubernetes.io/instance"


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
        # Klutch's mark of a bound object (adopt.InjectBoundAnnotation in anynines/klutchio
        # bind/pkg/konnector/adopt/util.go), as the konnector's status controller sets it
        BOUND_ANNOTATION: "true",
    }
    meta["finalizers"] = [FINALIZER]
    return body


def control_plane_object(claim: Claim, namespace: str, protected: bool = False) -> dict[str, Any]:
    """The Control Plane copy in the mapped namespace: spec and the person's own metadata.
    ``protected``: the claim is deletion-protected (in Git or on the live App object); the copy
    says so, where the bind API sees it and refuses an unforced unbind (bind_api/unbinding.py)."""
    body = control_plane_body(claim.body, namespace)
    if protected:
        body["metadata"]["annotations"][DELETION_PROTECTION] = "true"
    return body


def protection_differs(copy: Mapping[str, Any], upstream: Mapping[str, Any] | None) -> bool:
    """Whether a live Control Plane copy still says deletion-protected after the claim stopped
    being so (``needs_apply`` checks only what the copy sets, not what it dropped)."""
    if upstream is None or (upstream.get("metadata") or {}).get("deletionTimestamp"):
        return False
    return deletion_protected(copy) != deletion_protected(upstream)


def control_plane_body(document: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """``control_plane_object`` of a document (Git's, or a live App object's mirrored body)."""
    body = copy.deepcopy(dict(document))
    meta = body.get("metadata") or {}
    body["metadata"] = {
        "name": meta["name"],
        "namespace": namespace,
        "annotations": {**_own(meta.get("annotations")), BOUND_ANNOTATION: "true"},
    }
    if labels := _own(meta.get("labels")):
        body["metadata"]["labels"] = labels
    return body


def repository_of(live: Mapping[str, Any]) -> str | None:
    """The repository whose claim an App object is (our label), if any."""
    return ((live.get("metadata") or {}).get("labels") or {}).get(REPOSITORY_LABEL)


def mirrored_body(live: Mapping[str, Any]) -> dict[str, Any]:
    """An App object that Argo CD or Flux applied, as the document to mirror: without status,
    server fields and the tools' bookkeeping (labels, annotations, last-applied)."""
    body = {k: copy.deepcopy(v) for k, v in live.items() if k not in ("metadata", "status")}
    meta = live["metadata"]
    labels = _own(meta.get("labels"))
    if _argocd_managed(meta):
        labels.pop(ARGOCD_INSTANCE_LABEL, None)
    body["metadata"] = {
        "name": meta["name"],
        "namespace": meta["namespace"],
        **({"labels": labels} if labels else {}),
        **({"annotations": own} if (own := _own(meta.get("annotations"))) else {}),
    }
    return body


def _argocd_managed(meta: Mapping[str, Any]) -> bool:
    """Argo CD's field manager or annotations. With its default label tracking the manager is
    the only sign: the informer's cache keeps managedFields' managers for this."""
    return any(
        entry.get("manager") == ARGOCD_MANAGER for entry in meta.get("managedFields") or []
    ) or any(k.startswith("argocd.argoproj.io/") for k in meta.get("annotations") or {})


def adoption_object(live: Mapping[str, Any], repository: str) -> dict[str, Any] | None:
    """The apply that marks an App object another tool wrote as ours: our label and finalizer,
    nothing else, so no field of theirs changes owner. None when both are there already.

    The uid makes it a precondition: an apply never recreates an object deleted meanwhile.
    """
    meta = live["metadata"]
    if repository_of(live) == repository and FINALIZER in (meta.get("finalizers") or []):
        return None
    return {
        "apiVersion": live["apiVersion"],
        "kind": live["kind"],
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "labels": {REPOSITORY_LABEL: repository},
            "finalizers": [FINALIZER],
        },
    }


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
    return bool(want == have)


def status_patch(live_app: Mapping[str, Any], status: Mapping[str, Any]) -> dict[str, Any]:
    """The status-subresource apply that gives the App object ``status`` (``app_status``)."""
    meta = live_app["metadata"]
    return {
        "apiVersion": live_app["apiVersion"],
        "kind": live_app["kind"],
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
        "status": status,
    }


def finalizer_release(live: Mapping[str, Any], finalizer: str = FINALIZER) -> dict[str, Any] | None:
    """The merge patch that drops ``finalizer``, preconditioned on the resourceVersion the list
    was read at: a merge patch replaces the whole list, so a finalizer another controller added
    since would be lost; with the precondition the API server answers 409 instead and the list
    is read again. None when the object does not carry ``finalizer``."""
    meta = live["metadata"]
    finalizers = list(meta.get("finalizers") or [])
    if finalizer not in finalizers:
        return None
    remaining = [f for f in finalizers if f != finalizer]
    return {
        "metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": remaining or None}
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


def claimed_by_konnector(upstream: Mapping[str, Any]) -> bool:
    """Whether a Control Plane Secret carries the mark Klutch's konnector puts on a provider-owned
    object it syncs down (``makeProviderOwner`` in anynines/klutchio bind/pkg/konnector/
    controllers/cluster/claimedresources/claimedresources_reconciler.go). The konnector then
    replaces the App copy with its own on every change, so the reconciler leaves it the copy."""
    annotations = (upstream.get("metadata") or {}).get("annotations") or {}
    return RESOURCE_OWNER in annotations


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


# Field managers whose App fields a claim written into Git takes over, as Flux's
# kustomize-controller does (fluxcd/kustomize-controller internal/controller/
# kustomization_controller.go: "kubectl" by Apply and by Update, "before-first-apply" by Update,
# matched by prefix on the object itself, not its subresources: fluxcd/pkg ssa
# PatchRemoveFieldsManagers). A claim made with kubectl (and mirrored by Klutch's konnector) then
# moves to Git without a field conflict; other tools (Argo CD, Flux) keep theirs and the conflict.
TAKEOVER_MANAGERS = (("kubectl", "Apply"), ("kubectl", "Update"), ("before-first-apply", "Update"))


def without_kubectl_managers(
    managed_fields: Iterable[Mapping[str, Any]],
) -> list[dict[str, Any]] | None:
    """The object's managedFields without kubectl's entries, or None when it has none.

    An empty remainder is one empty entry: the apiserver ignores an empty list."""
    entries = [dict(e) for e in managed_fields]
    kept = [
        e
        for e in entries
        if e.get("subresource")
        or not any(
            str(e.get("manager", "")).startswith(name) and e.get("operation") == operation
            for name, operation in TAKEOVER_MANAGERS
        )
    ]
    if len(kept) == len(entries):
        return None
    return kept or [{}]
