"""Bindings: everything one consumer gets on the Control Plane, created and removed as one unit.

``bind`` applies the consumer's namespace, ServiceAccount and RBAC (``klutch_gitops.consumer``), an
APIServiceExportRequest per requested API answered with an APIServiceExport (a snapshot of the
Control Plane CRD the template selects), the ClusterBinding ``cluster`` and — for a repository —
a RepositoryBinding for the reconciler with its credentials in Secrets. Every object has a stable
name and is applied server-side, so binding again returns the same result.

``unbind`` deletes the consumer namespace (``bind_api.unbinding`` says what that deletes and refuses
while a claim is deletion-protected). Its APIServiceNamespaces carry the namespace controller's
finalizer, so the mapped namespaces (and the claims in them) go with it; Klutch leaves all of this
behind.
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

from bind_api import unbinding
from bind_api.export_requests import apply_export
from bind_api.ownership import Refused, checked_namespace, claim_namespace
from klutch_gitops.apis import (
    BIND_GROUPS_ANNOTATION,
    BINDER_KUBECONFIG_LABEL,
    CLUSTER_BINDINGS,
    REPOSITORY_BINDINGS,
)
from klutch_gitops.binder_roles import CONSUMER_ROLE, ensure_cluster_role
from klutch_gitops.consumer import (
    FIELD_MANAGER,
    bind_groups,
    binder_kubeconfig,
    namespaced_objects,
)
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import SUCCEEDED, list_templates, offered
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.resources import NAMESPACES, SECRETS

BINDER_SECRET = "klutch-binder-kubeconfig"  # noqa: S105 - a Secret's name, not a password
PROVIDER_PRETTY_NAME = "klutch-gitops"


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


def match_templates(
    templates: Iterable[dict[str, Any]], apis: Iterable[str]
) -> dict[str, dict[str, Any]]:
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
) -> dict[str, dict[str, Any]]:
    """Templates of both groups (in ``namespace``, or all), keyed by the requested API."""
    return match_templates(list_templates(admin, namespace), list(apis))


# -- pure builders ----------------------------------------------------------------------------


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


def binder_objects(namespace: str, kubeconfig: str) -> list[tuple[Resource, dict[str, Any]]]:
    """The binder kubeconfig's Secret and the ClusterBinding ``cluster`` that names it."""
    return [
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
    ]


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
    namespace, identity = checked_namespace(
        admin, request.identity, request.cluster_id, prefix, limit
    )
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
    phases = {api: apply_export(admin, namespace, template) for api, template in templates.items()}
    kubeconfig = yaml.safe_dump(binder_kubeconfig(admin, namespace), sort_keys=False)
    _apply_all(admin, [*binder_objects(namespace, kubeconfig), *repository])
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


def _apply_all(admin: Kube, objects: Iterable[tuple[Resource, dict[str, Any]]]) -> None:
    for resource, body in objects:
        admin.apply(resource, body, field_manager=FIELD_MANAGER, force=True)


def unbind(
    admin: Kube, consumer_namespace: str, timeout: float = 120.0, *, force: bool = True
) -> None:
    """Delete the consumer namespace and wait until it and its mapped namespaces are gone.

    Only a namespace that ``bind`` made (it carries the identity annotation) is deleted, and
    without ``force`` none holding a deletion-protected claim (``bind_api.unbinding``). The
    namespace controller's finalizer on each APIServiceNamespace deletes the mapped namespace
    first; when that does not happen in time, the error names what remains.
    """
    if unbinding.start(admin, consumer_namespace, force=force) is None:
        return
    deadline = time.monotonic() + timeout
    while remaining := unbinding.remaining(admin, consumer_namespace):
        if time.monotonic() > deadline:
            raise KlutchError(
                f"unbinding {consumer_namespace} did not finish in {timeout:.0f}s; "
                f"remaining: {', '.join(remaining)}",
                "check that the APIServiceNamespace controller runs (its finalizer deletes the "
                "mapped namespaces), then unbind again",
            )
        time.sleep(0.5)
