"""Bindings: everything one consumer gets on the Control Plane, created and removed as one unit.

``bind`` applies the consumer's namespace, ServiceAccount and RBAC (``klutch_gitops.consumer``), an
APIServiceExportRequest per requested API answered with an APIServiceExport (a snapshot of the
Control Plane CRD the template selects), the ClusterBinding ``cluster`` and — for a repository —
a RepositoryBinding for the reconciler with its credentials in Secrets. Every object has a stable
name and is applied server-side, so binding again returns the same result.

``unbind`` deletes the consumer namespace. Its APIServiceNamespaces carry the namespace
controller's finalizer, so the mapped namespaces (and the claims in them) go with it; Klutch leaves
all of this behind.
"""

from __future__ import annotations

import base64
import hashlib
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    BIND_GROUPS_ANNOTATION,
    BINDER_KUBECONFIG_LABEL,
    CLUSTER_BINDINGS,
    CONSUMER_LABEL,
    EXPORT_REQUESTS,
    IDENTITY_ANNOTATION,
    REPOSITORY_BINDINGS,
)
from klutch_gitops.binder_roles import CONSUMER_ROLE, ensure_cluster_role
from klutch_gitops.consumer import (
    FIELD_MANAGER,
    bind_groups,
    binder_kubeconfig,
    consumer_namespace,
    identity_annotation,
    identity_of,
    legacy_consumer_namespace,
    namespace_object,
    namespaced_objects,
    owner_of,
)
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import (
    FAILED,
    SUCCEEDED,
    export_object,
    list_templates,
    missing_crd,
    offered,
    request_status,
    template_api,
)
from klutch_gitops.kube.client import CRDS, NAMESPACES, SECRETS, Kube, KubeError, Resource

BINDER_SECRET = "klutch-binder-kubeconfig"  # noqa: S105 - a Secret's name, not a password
PROVIDER_PRETTY_NAME = "klutch-gitops"


class Refused(KlutchError):
    """A refusal with the HTTP status the bind API answers it with."""

    def __init__(self, status: int, message: str, fix: str) -> None:
        super().__init__(message, fix)
        self.status = status


@dataclass(frozen=True)
class Repository:
    """The application repository the reconciler follows; credentials only ever go to a Secret."""

    url: str
    app_namespaces: tuple[str, ...]
    branch: str = "main"
    path: str = "."
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ssh_private_key: str | None = field(default=None, repr=False)
    known_hosts: str | None = None


@dataclass(frozen=True)
class BindingRequest:
    """Who binds (OIDC ``sub``), from which App Cluster, which APIs, and optionally a repository."""

    identity: str
    cluster_id: str
    apis: tuple[str, ...]
    repository: Repository | None = None
    app_kubeconfig: str | None = field(default=None, repr=False)
    # The caller's OIDC groups and the bind API's default allowed groups, recorded on the consumer
    # namespace so export requests made later with the binder kubeconfig are authorized alike.
    groups: tuple[str, ...] | None = None
    default_allowed_groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class BindingResult:
    consumer_namespace: str
    exports: tuple[str, ...]
    phases: dict[str, str]
    repository_binding: str | None
    kubeconfig: str = field(repr=False)


# -- templates --------------------------------------------------------------------------------


def match_templates(templates: Iterable[dict], apis: Iterable[str]) -> dict[str, dict]:
    """The template for each requested API, or one error naming what is not offered."""
    by_api = offered(templates)
    missing = [api for api in apis if api not in by_api]
    if missing:
        raise KlutchError(
            f"no APIServiceExportTemplate offers {', '.join(missing)}; "
            f"offered: {', '.join(sorted(by_api)) or 'none'}",
            "request one of the offered APIs, or ask the platform team to add a template",
        )
    return {api: by_api[api] for api in apis}


def find_templates(
    admin: Kube, apis: Iterable[str], namespace: str | None = None
) -> dict[str, dict]:
    """Templates of both groups (in ``namespace``, or all), keyed by the requested API."""
    return match_templates(list_templates(admin, namespace), list(apis))


# -- pure builders ----------------------------------------------------------------------------


def export_request(namespace: str, template: Mapping[str, Any]) -> dict[str, Any]:
    """An APIServiceExportRequest named ``<resource>.<group>``, as the template describes it."""
    spec = template.get("spec") or {}
    selector = spec["APIServiceSelector"]
    return {
        "apiVersion": EXPORT_REQUESTS.api_version,
        "kind": "APIServiceExportRequest",
        "metadata": {"name": template_api(template), "namespace": namespace},
        "spec": {
            "resources": [
                {
                    "group": selector["group"],
                    "resource": selector["resource"],
                    "versions": [selector["version"]] if selector.get("version") else [],
                    "permissionClaims": list(spec.get("permissionClaims") or []),
                }
            ]
        },
    }


def secret(
    namespace: str, name: str, values: Mapping[str, str], labels: Mapping[str, str] | None = None
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": meta,
        "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in sorted(values.items())},
    }


def cluster_binding(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": CLUSTER_BINDINGS.api_version,
        "kind": "ClusterBinding",
        "metadata": {"name": "cluster", "namespace": namespace},
        "spec": {
            "kubeconfigSecretRef": {"name": BINDER_SECRET, "key": "kubeconfig"},
            "providerPrettyName": PROVIDER_PRETTY_NAME,
        },
    }


def repository_binding_name(url: str, path: str, namespace: str) -> str:
    """Readable and stable: the repository's last URL segment plus a hash of URL and path.

    At most 40 characters, and short enough that ``<namespace>.<name>``, the reconciler's name of
    the registration, keeps the hash within 63 (names under the 10-hex-digit consumer namespaces
    stay what they were).
    """
    budget = min(31, 63 - len(namespace) - 1 - 9)
    base = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
    slug = re.sub(r"[^a-z0-9-]+", "-", base.lower()).strip("-")[: max(budget, 4)].strip("-")
    slug = slug or "repo"
    digest = hashlib.sha256(f"{url}#{path}".encode()).hexdigest()[:8]
    return f"{slug}-{digest}"


def git_credentials(repository: Repository) -> dict[str, str]:
    """The Secret keys the reconciler reads: username/password, or ssh-privatekey/known_hosts."""
    values = {
        "username": repository.username,
        "password": repository.password,
        "ssh-privatekey": repository.ssh_private_key,
        "known_hosts": repository.known_hosts,
    }
    return {key: value for key, value in values.items() if value is not None}


def repository_objects(
    namespace: str, repository: Repository, app_kubeconfig: str
) -> list[tuple[Resource, dict[str, Any]]]:
    """The RepositoryBinding and its Secrets: App kubeconfig and, when given, Git credentials."""
    name = repository_binding_name(repository.url, repository.path, namespace)
    spec: dict[str, Any] = {
        "url": repository.url,
        "branch": repository.branch,
        "path": repository.path,
        "appNamespaces": list(repository.app_namespaces),
        "appCluster": {"kubeconfigSecretRef": {"name": f"{name}-app-kubeconfig"}},
        "controlPlane": {"kubeconfigSecretRef": {"name": BINDER_SECRET}},
    }
    objects = [
        (
            SECRETS,
            secret(namespace, f"{name}-app-kubeconfig", {"kubeconfig": app_kubeconfig}),
        )
    ]
    if credentials := git_credentials(repository):
        objects.append((SECRETS, secret(namespace, f"{name}-git", credentials)))
        spec["credentialsSecretRef"] = {"name": f"{name}-git"}
    binding = {
        "apiVersion": REPOSITORY_BINDINGS.api_version,
        "kind": "RepositoryBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    return [*objects, (REPOSITORY_BINDINGS, binding)]


# -- I/O --------------------------------------------------------------------------------------


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
) -> tuple[str, dict | None]:
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


def bind(
    admin: Kube,
    request: BindingRequest,
    *,
    prefix: str = "cluster",
    template_namespace: str | None = None,
    limit: int | None = None,
) -> BindingResult:
    """Create or update everything the binding consists of; binding again changes nothing.

    Everything is checked before the first object is written: the templates, that the consumer
    namespace is free or this identity's (409), and the identity's binding limit (429).
    """
    if request.repository is not None and not request.app_kubeconfig:
        raise KlutchError(
            "a repository binding needs the App Cluster kubeconfig",
            "pass the kubeconfig the reconciler should use for the App Cluster",
        )
    templates = find_templates(admin, request.apis, template_namespace)
    identity = identity_of(request.identity, request.cluster_id)
    namespace, live = choose_namespace(admin, request.identity, request.cluster_id, prefix)
    check_owner(namespace, live, identity)
    if live is None and limit is not None:
        check_limit(len(owned_by(admin.list(NAMESPACES)[0], request.identity)), limit)
    claim_namespace(admin, namespace, identity)
    if request.groups is not None:
        annotations = {
            BIND_GROUPS_ANNOTATION: bind_groups(request.groups, request.default_allowed_groups)
        }
        admin.patch(NAMESPACES, None, namespace, {"metadata": {"annotations": annotations}})
    ensure_cluster_role(admin, CONSUMER_ROLE)  # the chart ships it; a bare install has not
    _apply_all(admin, namespaced_objects(namespace, ()))
    repository = (
        repository_objects(namespace, request.repository, request.app_kubeconfig)
        if request.repository is not None and request.app_kubeconfig
        else []
    )
    if repository:
        _dry_run(admin, *repository[-1])  # the CRD's refusal comes before any Secret is written
    phases = {api: _export(admin, namespace, template) for api, template in templates.items()}
    kubeconfig = yaml.safe_dump(binder_kubeconfig(admin, namespace), sort_keys=False)
    objects = [
        (
            SECRETS,
            secret(
                namespace,
                BINDER_SECRET,
                {"kubeconfig": kubeconfig},
                {BINDER_KUBECONFIG_LABEL: "true"},  # the reconciler renews its token
            ),
        ),
        (CLUSTER_BINDINGS, cluster_binding(namespace)),
        *repository,
    ]
    _apply_all(admin, objects)
    return BindingResult(
        consumer_namespace=namespace,
        exports=tuple(api for api, phase in phases.items() if phase == SUCCEEDED),
        phases=phases,
        repository_binding=repository[-1][1]["metadata"]["name"] if repository else None,
        kubeconfig=kubeconfig,
    )


def _dry_run(admin: Kube, resource: Resource, body: dict[str, Any]) -> None:
    try:
        admin.apply(resource, body, field_manager=FIELD_MANAGER, force=True, dry_run=True)
    except KubeError as error:
        if error.status not in (400, 422):
            raise
        raise Refused(
            422,
            f"the Control Plane refused the {resource.kind}: {error.message}; nothing of the "
            "repository was written",
            "correct the repository fields it names and bind again",
        ) from None


def _export(admin: Kube, namespace: str, template: dict) -> str:
    """Apply the request, answer it with an export (or without one), and return its phase."""
    body = export_request(namespace, template)
    name = body["metadata"]["name"]
    live = admin.get(EXPORT_REQUESTS, namespace, name)
    if live is not None and _resources(live) != _resources(body):
        admin.delete(EXPORT_REQUESTS, namespace, name)  # spec.resources is immutable
        _wait_gone(admin, EXPORT_REQUESTS, namespace, name, 30)
        live = None
    live = admin.apply(EXPORT_REQUESTS, body, field_manager=FIELD_MANAGER, force=True)
    crd = admin.get(CRDS, None, name)
    problem = missing_crd(template, crd)
    if problem is None and crd is not None:
        admin.apply(
            API_SERVICE_EXPORTS,
            export_object(namespace, template, crd),
            field_manager=FIELD_MANAGER,
            force=True,
        )
    else:
        admin.delete(API_SERVICE_EXPORTS, namespace, name)  # a stale export would still serve
    status = live.get("status") or {}
    if status.get("phase") != (FAILED if problem else SUCCEEDED) or (
        status.get("terminalMessage") != problem
    ):
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        admin.apply(
            EXPORT_REQUESTS,
            request_status(name, namespace, problem, now),
            field_manager=FIELD_MANAGER,
            force=True,
            subresource="status",
        )
    return FAILED if problem else SUCCEEDED


def _resources(request: Mapping[str, Any]) -> list[tuple[str, str, tuple[str, ...]]]:
    """What identifies a request's APIs (claims get server defaults, so they are left out)."""
    return [
        (r.get("group", ""), r["resource"], tuple(r.get("versions") or ()))
        for r in (request.get("spec") or {}).get("resources") or []
    ]


def _apply_all(admin: Kube, objects: Iterable[tuple[Resource, dict[str, Any]]]) -> None:
    for resource, body in objects:
        admin.apply(resource, body, field_manager=FIELD_MANAGER, force=True)


def unbind(admin: Kube, consumer_namespace: str, timeout: float = 120.0) -> None:
    """Delete the consumer namespace and wait until it and its mapped namespaces are gone.

    Only a namespace that ``bind`` made (it carries the identity annotation) is deleted. The
    namespace controller's finalizer on each APIServiceNamespace deletes the mapped namespace
    first; when that does not happen in time, the error names what remains.
    """
    namespace = admin.get(NAMESPACES, None, consumer_namespace)
    if namespace is None:
        return
    if IDENTITY_ANNOTATION not in (namespace["metadata"].get("annotations") or {}):
        raise KlutchError(
            f"namespace {consumer_namespace} has no {IDENTITY_ANNOTATION}: not a consumer's",
            "pass the consumer namespace that bind returned",
        )
    admin.delete(NAMESPACES, None, consumer_namespace)
    deadline = time.monotonic() + timeout
    while remaining := _remaining(admin, consumer_namespace):
        if time.monotonic() > deadline:
            raise KlutchError(
                f"unbinding {consumer_namespace} did not finish in {timeout:.0f}s; "
                f"remaining: {', '.join(remaining)}",
                "check that the APIServiceNamespace controller runs (its finalizer deletes the "
                "mapped namespaces), then unbind again",
            )
        time.sleep(0.5)


def _remaining(admin: Kube, consumer: str) -> list[str]:
    """The consumer namespace, its mapped namespaces and mappings that still exist."""
    left = [f"namespace {consumer}"] if admin.get(NAMESPACES, None, consumer) else []
    mapped, _ = admin.list(NAMESPACES, label_selector=f"{CONSUMER_LABEL}={consumer}")
    left += [f"namespace {n['metadata']['name']}" for n in mapped]
    if left:
        try:
            mappings, _ = admin.list(API_SERVICE_NAMESPACES, consumer)
        except KubeError as error:
            if not error.not_found:
                raise
            mappings = []
        left += [f"APIServiceNamespace {consumer}/{m['metadata']['name']}" for m in mappings]
    return left


def _wait_gone(admin: Kube, resource: Resource, namespace: str, name: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while admin.get(resource, namespace, name) is not None:
        if time.monotonic() > deadline:
            raise KlutchError(
                f"{resource.kind} {namespace}/{name} was not deleted in {timeout:.0f}s",
                f"check its finalizers: kubectl get {resource.plural} -n {namespace} {name}",
            )
        time.sleep(0.2)
