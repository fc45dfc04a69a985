"""Stage: server-side apply what differs, App Cluster first, then the Control Plane copy.

The App copy is applied without force (another field manager's fields are a reported conflict),
the Control Plane copy with force (it is our mirror: drift there is reverted). In external mode
the App copy only gets our label and finalizer; the spec there is the tool's.

"App first" is per claim: a Control Plane copy is written only once its App object was accepted
(it carries our finalizer, so the copy is never left without the object whose deletion removes
it), and the Normal Event about the copy goes on that object. Across claims the two clusters are
written at once: one pool per cluster, a claim's Control Plane write queued when its App write
returns, so a cold sync costs the slower cluster's time, not the sum of both.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.events import NORMAL
from reconciler.failpoints import failpoint
from reconciler.manifests import Claim
from reconciler.sync import events, objects
from reconciler.sync.outcome import Failed
from reconciler.sync.view import View, claim_resource

# Writes in flight per cluster and pass. The registrations on one kubeconfig identity share one
# client that keeps up to 64 connections (binding.SHARED_POOL_CONNECTIONS): the workers' passes
# (4 x 8) and the informers' watches and the Event writer stay below it.
APPLY_CONCURRENCY = 8

REFUSAL_FIXES = {
    409: "another field manager owns these fields: remove them from Git or from the other tool",
    422: "change the claim so the Control Plane accepts it",
    403: "the binding may not do this: check the exported APIs and namespaces",
}


@dataclass(frozen=True)
class Source:
    """Where the claims come from: what the App copy records, and who writes it."""

    repository: str
    path: str
    commit: str
    external: bool  # Argo CD or Flux applies the App copy


@dataclass(frozen=True)
class Write:
    claim: Claim
    resource: Resource
    app_body: dict[str, Any] | None  # None: the App copy is as it should be
    cp_body: (
        dict[str, Any] | None
    )  # None: the Control Plane copy is, or its namespace is not mapped yet


def apply_claims(view: View, claims: tuple[Claim, ...], source: Source) -> list[Failed]:
    """Write what differs for every claim; the refused writes as problems.

    Deciding is cheap and done in order; only the writes run concurrently, so an idle pass
    costs no threads and a cold sync of many claims is not one round-trip at a time.
    """
    writes = [write for claim in claims if (write := plan(view, claim, source))]
    if len(writes) <= 1:
        found = [write_claim(view, write, source.external) for write in writes]
    else:
        found = write_both(view, writes, source.external)
    return [p for problems in found for p in problems]


def write_both(view: View, writes: list[Write], external: bool) -> list[list[Failed]]:
    """Each write's problems, the App Cluster and the Control Plane written by a pool each: a
    claim's Control Plane write is queued when its App write returns (or at once without one).
    Returns once every write is done; an unexpected error is raised after that."""
    with ThreadPoolExecutor(APPLY_CONCURRENCY, thread_name_prefix="apply-cp") as cp_pool:

        def app_then_cp(write: Write) -> Callable[[], list[Failed]]:
            live, problems = write_app(view, write, external)
            if problems or write.cp_body is None:
                return lambda: problems
            return cp_pool.submit(write_cp, view, write, write.cp_body, live).result

        with ThreadPoolExecutor(APPLY_CONCURRENCY, thread_name_prefix="apply-app") as app_pool:
            queued = list(app_pool.map(app_then_cp, writes))
        return [result() for result in queued]


def plan(view: View, claim: Claim, source: Source) -> Write | None:
    """What to write for one claim (App body, Control Plane body), or None if in sync.

    External mode: the App body only adopts (label, finalizer); the spec is the tool's."""
    export = view.export_of(claim)
    ident = claim.identity
    live = view.app_claim(export, ident.namespace, ident.name)
    if live is not None and live["metadata"].get("deletionTimestamp"):
        return None  # finishing a deletion first; the next pass recreates it
    if source.external:
        app_body = objects.adoption_object(live, source.repository) if live is not None else None
    else:
        body = objects.app_object(claim, source.repository, source.path, source.commit, live)
        app_body = body if objects.needs_apply(body, live) else None
    target = view.mapping.get(ident.namespace)
    cp_body = None
    if target is not None:
        protected = objects.deletion_protected(claim.body) or (
            live is not None and objects.deletion_protected(live)
        )
        copy = objects.control_plane_object(claim, target, protected)
        upstream = view.cp_claim(export, target, ident.name)
        stale = objects.protection_differs(copy, upstream)
        cp_body = copy if stale or objects.needs_apply(copy, upstream) else None
    if app_body is None and cp_body is None:
        return None
    return Write(claim, claim_resource(export, claim), app_body, cp_body)


def write_claim(view: View, write: Write, external: bool) -> list[Failed]:
    """One claim: its App copy, then (if that was accepted) its Control Plane copy."""
    live, problems = write_app(view, write, external)
    if problems or write.cp_body is None:
        return problems
    return write_cp(view, write, write.cp_body, live)


def write_app(
    view: View, write: Write, external: bool
) -> tuple[dict[str, Any] | None, list[Failed]]:
    """The App copy, if it differs: the live App object afterwards, and the refusal if any
    (with a Warning Event on the object where it exists)."""
    claim, resource = write.claim, write.resource
    ident = claim.identity
    live = view.app_claim(view.export_of(claim), ident.namespace, ident.name)
    if write.app_body is None:
        return live, []
    try:
        return apply_app(view, resource, write.app_body, external) or live, []
    except KubeError as error:
        if live is not None:
            view.event(resource, live, "ApplyFailed", error.message)
        return live, [refusal(claim, error, "App Cluster")]


def write_cp(
    view: View, write: Write, body: dict[str, Any], live: dict[str, Any] | None
) -> list[Failed]:
    """The Control Plane copy ``body``, and a Normal Event about it on the App object ``live``."""
    claim, resource = write.claim, write.resource
    try:
        view.apply_cp(resource, body)
    except KubeError as error:
        return [refusal(claim, error, "Control Plane")]
    failpoint("controlplane.after-apply")
    if live is not None:  # a Normal Event on change only: an unchanged copy is not applied
        namespace = body["metadata"]["namespace"]
        view.event(
            resource,
            live,
            events.APPLIED,
            f"applied {claim.location} to the Control Plane (namespace {namespace})",
            NORMAL,
        )
    return []


def apply_app(
    view: View, resource: Resource, body: dict[str, Any], external: bool
) -> dict[str, Any]:
    """Server-side apply of an App claim. On a field conflict, once, the fields kubectl set
    are taken over as Flux does (``objects.without_kubectl_managers``) and the apply is
    repeated: a claim made with kubectl moves into Git. Another tool's fields stay a conflict.
    """
    try:
        return view.apply_app(resource, body)
    except KubeError as error:
        if not error.conflict or external:
            raise
        meta = body["metadata"]
        live = view.get_app(resource, meta["namespace"], meta["name"]) or {"metadata": {}}
        kept = objects.without_kubectl_managers(live["metadata"].get("managedFields") or [])
        if kept is None:
            raise
        version = live["metadata"]["resourceVersion"]  # a concurrent writer makes it a 409
        view.patch_app(
            resource,
            meta["namespace"],
            meta["name"],
            {"metadata": {"managedFields": kept, "resourceVersion": version}},
        )
        return view.apply_app(resource, body)


def refusal(claim: Claim, error: KubeError, where: str) -> Failed:
    return Failed(
        file=claim.location.file,
        document=claim.location.document,
        message=f"{where} refused {claim.identity}: {error.message}",
        fix=REFUSAL_FIXES.get(error.status, "see the message; the next sync retries"),
        identity=claim.identity,
    )
