"""Stage (``appSync: external``): the App objects Argo CD or Flux applied that this repository
mirrors, as claims.

Ours are those Git names (not yet adopted) and those carrying our label (adopted, even if Git
dropped them and the tool did not prune them: the App Cluster says what is deployed). What is
mirrored is what the tool applied, not Git's newest commit, which it may not have synced yet.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from reconciler.manifests import Claim, Identity, Location
from reconciler.sync import objects
from reconciler.sync.outcome import Failed
from reconciler.sync.view import View


def adopt(
    view: View,
    in_git: tuple[Claim, ...],
    repository: str,
    app_namespaces: tuple[str, ...],
    path: str,
) -> tuple[tuple[Claim, ...], list[Failed]]:
    """The claims to mirror from every exported kind's App objects, and the refused ones."""
    return adopted(live_claims(view), in_git, repository, app_namespaces, path)


def live_claims(view: View) -> list[dict[str, Any]]:
    """Every exported kind's App objects, as the informer caches hold them."""
    return [obj for export in view.exports.values() for obj in view.app_claims(export)]


def ahead_of_git(
    live_objects: Iterable[dict[str, Any]],
    in_git: tuple[Claim, ...],
    repository: str,
    app_namespaces: tuple[str, ...],
) -> dict[Identity, str]:
    """The App objects that say the tool acted on a commit newer than the Git view held, by
    identity, with their resourceVersion: one no repository's label claims that the view does
    not name (a claim just pushed, with no webhook to say so), and one of ours being deleted
    that the view still names (a claim just removed: the pass must not take it for one that
    is back in Git and let a held deletion-protected object go)."""
    named = {claim.identity for claim in in_git}
    found: dict[Identity, str] = {}
    for live in live_objects:
        meta = live["metadata"]
        if meta["namespace"] not in app_namespaces:
            continue
        identity, owner = Identity.of(live), objects.repository_of(live)
        if meta.get("deletionTimestamp"):
            stale = owner == repository and identity in named
        else:
            stale = owner is None and identity not in named
        if stale:
            found[identity] = meta.get("resourceVersion", "")
    return found


def fetch_for(ahead: dict[Identity, str], fetched_for: dict[Identity, str]) -> bool:
    """Whether Git must be fetched before adopting: an object ahead of the Git view, or a
    version of one, that no fetch was made for yet. Remembering (identity, resourceVersion)
    bounds it: an object that is truly someone else's costs one fetch per change of it, not one
    per informer event of every object in the namespace; a new version is asked about again,
    because the tool's apply of a claim Git now names changes it (its labels) without a new
    identity."""
    return any(fetched_for.get(identity) != version for identity, version in ahead.items())


def adopted(
    live_objects: Iterable[dict[str, Any]],
    in_git: tuple[Claim, ...],
    repository: str,
    app_namespaces: tuple[str, ...],
    path: str,
) -> tuple[tuple[Claim, ...], list[Failed]]:
    """The App objects to mirror, as claims sorted by identity; an object Git names that
    another repository's label claims is refused, not mirrored."""
    git_claims = {c.identity: c for c in in_git}
    claims: list[Claim] = []
    problems: list[Failed] = []
    for live in live_objects:
        meta = live["metadata"]
        if meta["namespace"] not in app_namespaces or meta.get("deletionTimestamp"):
            continue
        identity = Identity.of(live)
        git = git_claims.get(identity)
        owner = objects.repository_of(live)
        if owner not in (None, repository):
            if git is not None:
                problems.append(
                    Failed(
                        file=git.location.file,
                        document=git.location.document,
                        message=f"{identity} in the App Cluster belongs to repository "
                        f"{owner}; it is not mirrored from here",
                        fix="define each claim in one repository only",
                    )
                )
            continue
        if owner is None and git is None:
            continue  # someone else's object: not named by this repository
        claims.append(
            Claim(
                identity,
                live["apiVersion"],
                objects.mirrored_body(live),
                git.location if git else Location(path, 0),
                git.git_status if git else None,
            )
        )
    return tuple(sorted(claims, key=lambda c: c.identity)), problems
