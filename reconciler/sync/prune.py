"""Stages: delete what left Git, and release an App claim only when its Control Plane copy is gone.

A deletion-protected object is never deleted here and its Control Plane copy (the running service)
is never deleted while the annotation stands. One the tool (or a person) deletes is held by our
finalizer and reported — ``Held`` each pass, one Warning Event that the recorder counts up at
most every five minutes (klutch_gitops/kube/events.py), ``Ready`` False on the App object (observe)
— until either its claim is in Git again, and it is released *without* touching the Control Plane
copy so that the tool (or our next apply) re-creates it and adoption takes it back with its data,
or the annotation is removed from the live object, and it is deleted with its copy.
A kind that Klutch's konnector serves for another consumer namespace is not touched at all.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from klutch_gitops.apis import DELETION_PROTECTION
from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.events import NORMAL
from reconciler.manifests import Identity
from reconciler.sync import events, objects
from reconciler.sync.desired import DesiredState
from reconciler.sync.outcome import Failed, Held
from reconciler.sync.view import View, resource_of


def prune(view: View, desired: DesiredState, conflicts: Collection[str]) -> list[Failed]:
    """Delete what left Git — but never what a rejected document still names: a typo in a
    live claim, or a file that stopped parsing, must not delete a running data service."""
    keep = {c.identity for c in desired.claims} | {
        r.identity for r in desired.rejections if r.identity
    }
    # a rejection that cannot name its object (the file did not parse, ...) holds the file
    held_files = [r.file for r in desired.rejections if r.identity is None]
    problems: list[Failed] = []
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
                view.event(resource_of(export), live, DELETION_REFUSED, problem.message)
                continue
            view.delete_app(resource_of(export), meta["namespace"], meta["name"])
    return problems


def prune_refused(live: Mapping[str, Any]) -> Failed:
    return Failed(
        file=live["metadata"].get("annotations", {}).get(objects.FILE_ANNOTATION, ""),
        message=f"{Identity.of(live)} left Git but is deletion-protected; it was not deleted",
        fix=f"remove the {DELETION_PROTECTION} annotation from the live object to delete it",
    )


def finalize(
    view: View,
    repository: str,
    app_namespaces: tuple[str, ...],
    path: str,
    conflicts: Collection[str],
    held: set[Identity],
    *,
    in_git: Collection[Identity],
) -> tuple[set[Identity], list[Held]]:
    """Release an App claim only when its Control Plane copy is really gone, and never delete
    a deletion-protected one's copy: it is held while its claim is out of Git (``in_git``: the
    claims of the Git view this pass holds) and released, its copy untouched, once it is back.

    ``held``: the deletion-protected objects being deleted that the last pass reported (their
    Event is not repeated); returned, the ones this pass holds."""
    holding: set[Identity] = set()
    problems: list[Held] = []
    for export in view.exports.values():
        if export.name in conflicts:
            continue  # deletes nothing on the Control Plane while the conflict stands
        resource = resource_of(export)
        for live in view.app_claims(export):
            meta = live["metadata"]
            if not _finalizing(live, repository):
                continue
            protected = objects.deletion_protected(live)
            if protected and Identity.of(live) in in_git:
                _let_go(view, resource, live)
                continue
            target = view.mapping.get(meta["namespace"])
            if target is None and meta["namespace"] in app_namespaces:
                continue  # mapping not known yet (e.g. just restarted): keep holding
            if protected:
                problem = deletion_held(live, path)
                problems.append(problem)
                holding.add(Identity.of(live))
                if Identity.of(live) not in held:
                    view.event(resource, live, DELETION_REFUSED, problem.message)
                continue
            _release(view, resource, live, target)
    return holding, problems


DELETION_REFUSED = "DeletionRefused"
RELEASED = "Released"  # a held object whose claim is back in Git, let go without its copy
RELEASE_ATTEMPTS = 3


def _finalizing(live: dict[str, Any], repository: str) -> bool:
    """Whether an App object is being deleted and waits for our finalizer."""
    meta = live["metadata"]
    return bool(
        meta.get("deletionTimestamp")
        and objects.FINALIZER in (meta.get("finalizers") or [])
        and objects.repository_of(live) == repository
    )


def _release(view: View, resource: Resource, live: dict[str, Any], target: str | None) -> None:
    """Delete the Control Plane copy; once it is gone, drop our finalizer from the App object."""
    meta = live["metadata"]
    if target is not None and (
        view.delete_cp(resource, target, meta["name"])
        or view.get_cp(resource, target, meta["name"])
    ):
        return  # the CP informer's DELETED event brings us back
    if drop_finalizer(view, resource, live):
        view.event(resource, live, events.DELETED, "the Control Plane copy is deleted", NORMAL)


def _let_go(view: View, resource: Resource, live: dict[str, Any]) -> None:
    """A held deletion-protected object whose claim is in Git again: drop our finalizer and
    leave the Control Plane copy as it is. The object goes; the tool (or our next apply)
    re-creates it, and it is adopted again with the same copy and its data."""
    if drop_finalizer(view, resource, live):
        message = (
            f"{Identity.of(live)} is in Git again: released without touching its Control Plane "
            "copy; it is re-created and adopted again"
        )
        view.event(resource, live, RELEASED, message, NORMAL)


def drop_finalizer(view: View, resource: Resource, live: dict[str, Any]) -> bool:
    """Remove our finalizer with the resourceVersion it was read at as a precondition
    (``objects.finalizer_release``): another controller's finalizer added meanwhile is a 409,
    and the list is read again. False when the object is gone, no longer carries ours, or kept
    changing (its change events bring the next pass)."""
    current: dict[str, Any] | None = live
    for _ in range(RELEASE_ATTEMPTS):
        if current is None:
            return False
        patch = objects.finalizer_release(current)
        if patch is None:
            return False
        meta = current["metadata"]
        try:
            view.patch_app(resource, meta["namespace"], meta["name"], patch)
            return True
        except KubeError as error:
            if error.not_found:
                return False
            if not error.conflict:
                raise
        current = view.get_app(resource, meta["namespace"], meta["name"])
    return False


def deletion_held(live: dict[str, Any], path: str) -> Held:
    """A deletion-protected App object that is being deleted, reported."""
    message = (
        f"{Identity.of(live)} is being deleted but is deletion-protected; its Control Plane copy "
        "is kept and the deletion waits"
    )
    annotations = live["metadata"].get("annotations") or {}
    return Held(
        file=annotations.get(objects.FILE_ANNOTATION) or path,
        message=message,
        fix="to keep it, put the claim back in Git: the object is released without touching "
        "its Control Plane copy and is re-created with its data; to delete the service, "
        f"remove the {DELETION_PROTECTION} annotation from the live object",
        identity=Identity.of(live),
    )
