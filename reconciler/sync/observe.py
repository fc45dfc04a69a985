"""Stage: status and provider-owned Secrets from the Control Plane back to the App Cluster, and
the statuses Git gets."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from klutch_gitops.kube.client import Resource
from klutch_gitops.kube.conditions import now
from klutch_gitops.kube.resources import SECRETS
from reconciler.manifests import Claim, Export, Identity
from reconciler.sync import events, objects, progress
from reconciler.sync.app_status import AppStatusInputs, app_status, git_status
from reconciler.sync.desired import DesiredState
from reconciler.sync.outcome import Failed, Found, Held, only
from reconciler.sync.unchanged import Quiet
from reconciler.sync.view import View, claim_resource, resource_of
from reconciler.sync.writeback import ObservedStatus


def upstream(view: View, claim: Claim) -> dict[str, Any] | None:
    """The claim's Control Plane copy, from the cache; None while its namespace is unmapped."""
    target = view.mapping.get(claim.identity.namespace)
    if target is None:
        return None
    return view.cp_claim(view.export_of(claim), target, claim.identity.name)


def observe(
    view: View,
    desired: DesiredState,
    mirrored: tuple[Claim, ...],
    repository: str,
    found: Sequence[Found] = (),
    konnector_kinds: Collection[str] = (),
    quiet: Quiet | None = None,
) -> tuple[ObservedStatus, ...]:
    """Copy status and provider-owned Secrets to the mirrored App objects; return what Git
    gets (the status of every claim Git holds).

    A live claim whose change was refused says so: a mirrored claim tells the stages' ``Failed``
    (its apply failed); one left out tells the loader's refusal (its document was refused, so
    the live claim keeps its old spec), never another stage's: a kind a foreign konnector serves
    or another repository's object is not ours to write status on.
    An object whose deletion the pass holds (``Held``) says ``Ready`` False.
    ``konnector_kinds``: the exports (by name) a konnector of Klutch's serves.
    ``quiet``: the claims whose mirroring wrote nothing last time, to pass over while nothing
    it reads changed (``unchanged.Quiet``); None mirrors every claim."""
    held = events.refusals_by_claim(only(Held, found))
    told = events.refusals_by_claim(only(Failed, found))
    statuses = tuple(observed(view, claim, held.get(claim.identity)) for claim in desired.claims)
    untold = events.refusals_by_claim(desired.rejections)
    quiet = quiet or Quiet()
    for claim in mirrored:
        ident = claim.identity
        served = view.export_of(claim).name in konnector_kinds
        said = (told.get(ident), held.get(ident))
        inputs = quiet.inputs(view, claim, (*said, served))
        if not quiet.unchanged(claim, inputs):
            wrote = mirror(view, claim, *said, served, repository)
            quiet.seen(claim, None if wrote else inputs)
    quiet.done()
    left_out = {c.identity for c in mirrored}
    for identity in untold.keys() - left_out:
        tell(view, identity, repository, refused=untold[identity])
    for identity in held.keys() - left_out:
        tell(view, identity, repository, held=held[identity])
    drop_orphan_secrets(view, mirrored)
    return statuses


def mirror(
    view: View,
    claim: Claim,
    refused: str | None,
    held: str | None,
    konnector: bool,
    repository: str,
) -> bool:
    """Status and Secrets of one mirrored claim to its App object; whether anything was written.
    ``refused``, ``held``: why the pass refused its change, holds its deletion;
    ``konnector``: Klutch's konnector serves its kind."""
    export = view.export_of(claim)
    live = view.app_claim(export, claim.identity.namespace, claim.identity.name)
    copy = upstream(view, claim)
    if live is None or copy is None:
        return False
    target = view.mapping[claim.identity.namespace]
    in_sync = not objects.needs_apply(objects.control_plane_object(claim, target), copy)
    # Klutch's konnector writes the App status of a kind it serves too, copying the Control
    # Plane's as it is: our generation marks there would have the two rewrite each other.
    stamped, top = (False, False) if konnector else stamps(export, live)
    inputs = AppStatusInputs(live, copy, now(), in_sync, refused, held, stamped, top)
    wrote = write_status(view, claim_resource(export, claim), inputs)
    return copy_secrets(view, claim, live, target, repository) or wrote


def observed(view: View, claim: Claim, held: str | None) -> ObservedStatus:
    """What Git gets for a claim: its Control Plane copy's status (``Ready`` False while its
    App object's deletion is held, ``held``)."""
    status = git_status((upstream(view, claim) or {}).get("status"), held)
    return ObservedStatus(
        claim.identity, claim.api_version, status, claim.location.file, claim.location.document
    )


def write_status(view: View, resource: Resource, inputs: AppStatusInputs) -> bool:
    """Give the live App claim its status (``app_status``), and a Warning Event when it starts
    telling of a refusal (or tells anew; finalize tells of the held deletion). Whether it
    wrote."""
    status = app_status(inputs)
    if status is None:
        return False
    view.apply_app(resource, objects.status_patch(inputs.live, status), force=True, status=True)
    if inputs.refused is not None:
        view.event(resource, inputs.live, events.RECONCILE_ERROR, inputs.refused)
    return True


def tell(
    view: View,
    identity: Identity,
    repo: str,
    refused: str | None = None,
    held: str | None = None,
) -> None:
    """A claim whose document was refused keeps its old spec live: its status says why
    (``refused``); one whose deletion is held (not mirrored: out of Git, or being deleted) says
    so (``held``).

    Only a live claim of this repository with a Control Plane copy: one that never got there
    has nothing to tell on (the refusal is in the RepositoryBinding and in Git)."""
    export = view.exports.get((identity.group, identity.kind))
    target = view.mapping.get(identity.namespace)
    if export is None or target is None:
        return
    live = view.app_claim(export, identity.namespace, identity.name)
    if live is None or objects.repository_of(live) != repo:
        return
    copy = view.cp_claim(export, target, identity.name)
    if copy is None:
        return
    body = objects.control_plane_body(objects.mirrored_body(live), target)
    in_sync = not objects.needs_apply(body, copy)
    stamped, top = stamps(export, live)
    inputs = AppStatusInputs(live, copy, now(), in_sync, refused, held, stamped, top)
    write_status(view, resource_of(export, _version(live)), inputs)


def _version(live: dict[str, Any]) -> str | None:
    return str(live.get("apiVersion", "")).rpartition("/")[2] or None


def stamps(export: Export, live: dict[str, Any]) -> tuple[bool, bool]:
    """Whether the live App claim's version lets its conditions, and its status itself, carry
    ``observedGeneration``: the export's schema, which the App CRD copies (conditions:
    Crossplane 2's claims yes, 1.20's no; top-level: where the XRD declares it, as the
    catalog's do on both lines)."""
    version = _version(live)
    schema = (export.schemas.get(version) if version else None) or {}
    return progress.conditions_take_generation(schema), progress.status_takes_generation(schema)


def copy_secrets(
    view: View, claim: Claim, live: dict[str, Any], target: str, repository: str
) -> bool:
    """The provider's Secrets of a claim to its App namespace; whether anything was written."""
    if not view.cp_secrets_synced(target):
        return False  # an unfilled cache would look like deleted credentials
    namespace = claim.identity.namespace
    wrote = False
    for name in objects.credential_secret_names(claim.body):
        source = view.cp_secret(target, name)
        current = view.secret_copy(namespace, name)
        if source is None:
            if current is not None:
                view.delete_app(SECRETS, namespace, name)
                wrote = True
            continue
        if objects.claimed_by_konnector(source):
            continue  # Klutch's konnector copies it down; a second writer would fight it
        wanted = objects.secret_copy(source, namespace, repository, live)
        if (
            current is None
            or current.get("data") != wanted["data"]
            or objects.needs_apply(wanted, current)
        ):
            view.apply_app(SECRETS, wanted, force=True)
            wrote = True
    return wrote


def drop_orphan_secrets(view: View, claims: tuple[Claim, ...]) -> None:
    """Drop a copied Secret its claim no longer names. A Secret whose claim is gone goes
    with it (ownerReference); one whose claim was only rejected stays, like the claim."""
    named = {
        (c.identity.namespace, c.identity.kind, c.identity.name): objects.credential_secret_names(
            c.body
        )
        for c in claims
    }
    for secret in view.secret_copies():
        meta = secret["metadata"]
        for owner in meta.get("ownerReferences") or []:
            wanted = named.get((meta["namespace"], owner["kind"], owner["name"]))
            if wanted is not None and meta["name"] not in wanted:
                view.delete_app(SECRETS, meta["namespace"], meta["name"])
