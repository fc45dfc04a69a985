"""Stages: delete what left Git, and release an App claim only when its Control Plane copy is gone.

A deletion-protected object is never deleted here and its deletion never finishes: it is reported
(a Rejection each pass, one Warning Event that the recorder counts up at most every five minutes,
klutch_gitops/kube/events.py) until the annotation is removed from the live object.
A kind that Klutch's konnector serves for another consumer namespace is not touched at all.
"""

from __future__ import annotations

from collections.abc import Collection

from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.events import NORMAL
from klutch_gitops.manifests import Identity, Rejection
from reconciler.sync import events, objects
from reconciler.sync.desired import DesiredState
from reconciler.sync.view import View, resource_of


def prune(view: View, desired: DesiredState, conflicts: Collection[str]) -> list[Rejection]:
    """Delete what left Git — but never what a rejected document still names: a typo in a
    live claim, or a file that stopped parsing, must not delete a running data service."""
    keep = {c.identity for c in desired.claims} | {
        r.identity for r in desired.rejections if r.identity
    }
    # a rejection that cannot name its object (the file did not parse, ...) holds the file
    held_files = [r.file for r in desired.rejections if r.identity is None]
    problems: list[Rejection] = []
    for export in view.exports.values():
        if export.name in conflicts:
            continue  # a konnector writes this kind for another consumer: hands off
        for live in objects.to_prune(view.app_claims(export), keep):
            meta = live["metadata"]
            source = (meta.get("annotations") or {}).get(objects.FILE_ANNOTATION, "")
            if any(objects.within(source, held) for held in held_files):
                continue
            if objects.deletion_protected(live):
                problem = prune_refused(live)
                problems.append(problem)
                view.event(resource_of(export), live, "DeletionRefused", problem.message)
                continue
            view.delete_app(resource_of(export), meta["namespace"], meta["name"])
    return problems


def prune_refused(live: dict) -> Rejection:
    return Rejection(
        file=live["metadata"].get("annotations", {}).get(objects.FILE_ANNOTATION, ""),
        message=f"{Identity.of(live)} left Git but is deletion-protected; it was not deleted",
        fix=f"remove the {objects.DELETION_PROTECTION} annotation from the live object to "
        "delete it",
    )


def finalize(
    view: View,
    repository: str,
    app_namespaces: tuple[str, ...],
    path: str,
    conflicts: Collection[str],
    held: set[Identity],
) -> tuple[set[Identity], list[Rejection]]:
    """Release an App claim only when its Control Plane copy is really gone, and never a
    deletion-protected one: its copy (the running service) stays until the annotation goes.

    ``held``: the deletion-protected objects being deleted that the last pass reported (their
    Event is not repeated); returned, the ones this pass holds."""
    holding: set[Identity] = set()
    problems: list[Rejection] = []
    for export in view.exports.values():
        if export.name in conflicts:
            continue  # deletes nothing on the Control Plane while the conflict stands
        resource = resource_of(export)
        for live in view.app_claims(export):
            meta = live["metadata"]
            if not _finalizing(live, repository):
                continue
            target = view.mapping.get(meta["namespace"])
            if target is None and meta["namespace"] in app_namespaces:
                continue  # mapping not known yet (e.g. just restarted): keep holding
            if objects.deletion_protected(live):
                problem = deletion_held(live, path)
                problems.append(problem)
                holding.add(Identity.of(live))
                if Identity.of(live) not in held:
                    view.event(resource, live, "DeletionRefused", problem.message)
                continue
            _release(view, resource, live, target)
    return holding, problems


def _finalizing(live: dict, repository: str) -> bool:
    """Whether an App object is being deleted and waits for our finalizer."""
    meta = live["metadata"]
    return bool(
        meta.get("deletionTimestamp")
        and objects.FINALIZER in (meta.get("finalizers") or [])
        and objects.repository_of(live) == repository
    )


def _release(view: View, resource: Resource, live: dict, target: str | None) -> None:
    """Delete the Control Plane copy; once it is gone, drop our finalizer from the App object."""
    meta = live["metadata"]
    if target is not None and (
        view.delete_cp(resource, target, meta["name"])
        or view.get_cp(resource, target, meta["name"])
    ):
        return  # the CP informer's DELETED event brings us back
    remaining = [f for f in meta["finalizers"] if f != objects.FINALIZER]
    try:
        view.patch_app(
            resource,
            meta["namespace"],
            meta["name"],
            {"metadata": {"finalizers": remaining or None}},
        )
    except KubeError as error:
        if not error.not_found:
            raise
        return
    view.event(resource, live, events.DELETED, "the Control Plane copy is deleted", NORMAL)


def deletion_held(live: dict, path: str) -> Rejection:
    """A deletion-protected App object that is being deleted, reported."""
    message = (
        f"{Identity.of(live)} is being deleted but is deletion-protected; its Control Plane copy "
        "is kept and the deletion waits"
    )
    annotations = live["metadata"].get("annotations") or {}
    return Rejection(
        file=annotations.get(objects.FILE_ANNOTATION) or path,
        message=message,
        fix=f"remove the {objects.DELETION_PROTECTION} annotation from the live object "
        "to let the deletion finish",
    )
