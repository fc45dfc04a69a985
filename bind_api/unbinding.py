"""What an unbind deletes, and the deletion itself: checked against deletion protection first.

Deleting the consumer namespace deletes its mapped namespaces (the APIServiceNamespaces carry the
namespace controller's finalizer) and with them every claim — every database — of the binding.
So the bind API shows the plan first (``GET /api/v1/bindings/{consumer}``) and refuses the
deletion (409) while a claim in a mapped namespace is deletion-protected, unless forced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from bind_api.ownership import Refused
from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    CONSUMER_LABEL,
    DELETION_PROTECTION,
    IDENTITY_ANNOTATION,
)
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.resources import NAMESPACES

SHOWN_PROTECTED = 5  # a refusal names this many protected claims, then counts the rest


@dataclass(frozen=True)
class PlannedClaim:
    kind: str
    namespace: str
    name: str
    database: bool
    protected: bool

    @property
    def ref(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class UnbindPlan:
    """Everything an unbind deletes on the Control Plane, as the CLI lists it."""

    consumer_namespace: str
    namespaces: list[str]
    claims: list[PlannedClaim] = field(default_factory=list)
    terminating: bool = False
    # claim kinds the bind API may not list (its RBAC): their protection cannot be checked
    unlisted: list[str] = field(default_factory=list)

    def protected(self) -> list[PlannedClaim]:
        return [c for c in self.claims if c.protected]

    def view(self) -> dict[str, Any]:
        return {
            "consumerNamespace": self.consumer_namespace,
            "terminating": self.terminating,
            "namespaces": self.namespaces,
            "claims": [asdict(c) for c in self.claims],
            "unlisted": self.unlisted,
        }


# -- pure ---------------------------------------------------------------------------------------


def claim_resources(exports: Iterable[Mapping[str, Any]]) -> list[Resource]:
    """The claim kinds of the consumer's APIServiceExports (their CRD snapshots), each at its
    storage version, else the first served one."""
    resources = []
    for export in exports:
        spec = export.get("spec") or {}
        versions = spec.get("versions") or []
        chosen = next((v for v in versions if v.get("storage")), None) or next(
            (v for v in versions if v.get("served")), None
        )
        names = spec.get("names") or {}
        if chosen and names.get("plural") and spec.get("group"):
            resources.append(
                Resource(spec["group"], chosen["name"], names["plural"], names.get("kind", ""))
            )
    return sorted(set(resources), key=lambda r: (r.group, r.plural))


def is_database(resource: Resource) -> bool:
    """A data-service instance (PostgresqlInstance, ...), as opposed to a backup or binding."""
    return resource.plural.endswith("instances")


def planned_claim(resource: Resource, obj: Mapping[str, Any]) -> PlannedClaim:
    meta = obj.get("metadata") or {}
    return PlannedClaim(
        kind=obj.get("kind") or resource.kind,
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        database=is_database(resource),
        protected=(meta.get("annotations") or {}).get(DELETION_PROTECTION) == "true",
    )


def protection_refusal(plan: UnbindPlan) -> Refused | None:
    """The 409 for a plan holding deletion-protected claims (or claims whose protection the bind
    API cannot see), naming them and both fixes."""
    protected = plan.protected()
    if plan.unlisted and not protected:
        return Refused(
            409,
            f"cannot tell whether claims of {plan.consumer_namespace} are deletion-protected: "
            f"the bind API may not list {', '.join(plan.unlisted)}",
            "grant the bind API's ClusterRole list on those resources, or unbind with --force "
            "(API: ?force=true) to delete them unchecked",
        )
    if not protected:
        return None
    names = ", ".join(c.ref for c in protected[:SHOWN_PROTECTED])
    more = len(protected) - SHOWN_PROTECTED
    return Refused(
        409,
        f"{len(protected)} claim(s) of {plan.consumer_namespace} are deletion-protected "
        f'({DELETION_PROTECTION}: "true"): {names}' + (f" and {more} more" if more > 0 else ""),
        "remove the annotation from those claims, or unbind with --force (API: ?force=true) "
        "to delete them anyway",
    )


# -- I/O ----------------------------------------------------------------------------------------


def plan(admin: Kube, consumer: str) -> UnbindPlan | None:
    """What unbinding ``consumer`` deletes now; None when its namespace is gone."""
    namespace = admin.get(NAMESPACES, None, consumer)
    return None if namespace is None else _planned(admin, namespace)


def _planned(admin: Kube, namespace: Mapping[str, Any]) -> UnbindPlan:
    """``plan`` of the consumer namespace ``namespace`` as just read."""
    consumer = namespace["metadata"]["name"]
    mapped, _ = admin.list(NAMESPACES, label_selector=f"{CONSUMER_LABEL}={consumer}")
    names = sorted(n["metadata"]["name"] for n in mapped)
    claims: list[PlannedClaim] = []
    unlisted: list[str] = []
    for resource in claim_resources(_list_or_none(admin, API_SERVICE_EXPORTS, consumer)):
        try:
            for name in names:
                found = _list_or_none(admin, resource, name)
                claims += [planned_claim(resource, o) for o in found]
        except KubeError as error:
            if error.status != 403:
                raise
            unlisted.append(f"{resource.plural}.{resource.group}")
    return UnbindPlan(
        consumer_namespace=consumer,
        namespaces=[consumer, *names],
        claims=claims,
        terminating=bool(namespace["metadata"].get("deletionTimestamp")),
        unlisted=unlisted,
    )


def start(admin: Kube, consumer: str, *, force: bool) -> UnbindPlan | None:
    """Delete the consumer namespace (never one ``bind`` did not make) unless a claim is
    deletion-protected and ``force`` is not set; returns what is being deleted, without waiting."""
    namespace = admin.get(NAMESPACES, None, consumer)
    if namespace is None:
        return None
    if IDENTITY_ANNOTATION not in (namespace["metadata"].get("annotations") or {}):
        raise KlutchError(
            f"namespace {consumer} has no {IDENTITY_ANNOTATION}: not a consumer's",
            "pass the consumer namespace that bind returned",
        )
    current = _planned(admin, namespace)
    if not force and (refusal := protection_refusal(current)):
        raise refusal
    admin.delete(NAMESPACES, None, consumer)
    return current


def remaining(admin: Kube, consumer: str) -> list[str]:
    """The consumer namespace, its mapped namespaces and mappings that still exist."""
    left = [f"namespace {consumer}"] if admin.get(NAMESPACES, None, consumer) else []
    mapped, _ = admin.list(NAMESPACES, label_selector=f"{CONSUMER_LABEL}={consumer}")
    left += [f"namespace {n['metadata']['name']}" for n in mapped]
    if left:
        left += [
            f"APIServiceNamespace {consumer}/{m['metadata']['name']}"
            for m in _list_or_none(admin, API_SERVICE_NAMESPACES, consumer)
        ]
    return left


def _list_or_none(admin: Kube, resource: Resource, namespace: str) -> list[dict[str, Any]]:
    """The objects, or none when the kind is not installed (or the namespace just went)."""
    try:
        return admin.list(resource, namespace)[0]
    except KubeError as error:
        if not error.not_found:
            raise
        return []
