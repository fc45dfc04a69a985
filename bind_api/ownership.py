"""Whose a consumer namespace is, and the checks a binding passes before it writes anything.

A consumer namespace belongs to the OIDC subject and App Cluster named in its identity
annotation; a namespace of someone else, one on its way out, or a binding past the identity's
limit is refused with the HTTP status the bind API answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from klutch_gitops.consumer import (
    consumer_namespace,
    identity_annotation,
    identity_of,
    legacy_consumer_namespace,
    namespace_object,
    owner_of,
)
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.kube.resources import NAMESPACES


class Refused(KlutchError):
    """A refusal with the HTTP status the bind API answers it with."""

    def __init__(self, status: int, message: str, fix: str) -> None:
        super().__init__(message, fix)
        self.status = status


def owned_by(namespaces: Iterable[Mapping[str, Any]], subject: str) -> list[Mapping[str, Any]]:
    """The consumer namespaces whose identity names exactly ``subject``."""
    return [
        ns
        for ns in namespaces
        if (identity := identity_annotation(ns)) is not None and owner_of(identity)[0] == subject
    ]


def check_owner(namespace: str, live: Mapping[str, Any] | None, identity: str) -> None:
    """A namespace that exists must be this identity's, and not on its way out."""
    if live is None:
        return
    if identity_annotation(live) != identity:
        raise Refused(
            409,
            f"namespace {namespace} already exists on the Control Plane and does not belong to "
            "this identity; nothing was bound",
            f"ask the platform team to look at namespace {namespace}: it must be removed before "
            "this App Cluster can bind",
        )
    if live["metadata"].get("deletionTimestamp"):
        raise Refused(
            409,
            f"consumer namespace {namespace} is being deleted (an unbind is in progress)",
            "bind again once the unbind has finished",
        )


def check_limit(owned: int, limit: int | None) -> None:
    """A new binding may not take an identity past ``limit`` bindings."""
    if limit is not None and owned >= limit:
        raise Refused(
            429,
            f"this identity already has {owned} bindings, the limit is {limit}; nothing was bound",
            "unbind one you no longer need (klutch-bind status, then klutch-bind unbind "
            "<consumer namespace>), or ask the platform team to raise bindingsPerIdentity",
        )


def choose_namespace(
    admin: Kube, subject: str, cluster_id: str, prefix: str
) -> tuple[str, dict[str, Any] | None]:
    """The consumer namespace of this identity and its live object, if any.

    A consumer bound under the old 40-bit name keeps it when that namespace carries exactly this
    identity, so binding again stays idempotent; everyone else gets the 130-bit name.
    """
    identity = identity_of(subject, cluster_id)
    legacy = legacy_consumer_namespace(subject, cluster_id, prefix)
    live = admin.get(NAMESPACES, None, legacy)
    if identity_annotation(live) == identity:
        return legacy, live
    name = consumer_namespace(subject, cluster_id, prefix)
    return name, admin.get(NAMESPACES, None, name)


def checked_namespace(
    admin: Kube, subject: str, cluster_id: str, prefix: str, limit: int | None
) -> tuple[str, str]:
    """The consumer namespace to bind into and its identity, once the namespace is free or this
    identity's (409) and a new binding stays within the identity's ``limit`` (429)."""
    identity = identity_of(subject, cluster_id)
    namespace, live = choose_namespace(admin, subject, cluster_id, prefix)
    check_owner(namespace, live, identity)
    if live is None and limit is not None:
        check_limit(len(owned_by(admin.list(NAMESPACES)[0], subject)), limit)
    return namespace, identity


def claim_namespace(admin: Kube, namespace: str, identity: str) -> None:
    """Create the consumer namespace, or verify that the one there is this identity's.

    Never applied over: a namespace made meanwhile for someone else stays theirs (409).
    """
    try:
        admin.create(NAMESPACES, namespace_object(namespace, identity))
    except KubeError as error:
        if not error.conflict:
            raise
        check_owner(namespace, admin.get(NAMESPACES, None, namespace), identity)
