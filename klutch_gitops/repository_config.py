"""A RepositoryBinding a tenant creates, read into a RepositorySpec: its spec validated by
``models.binding.RepositoryBindingSpec`` (the CRD's own source), every problem reported at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from klutch_gitops.apis import SUSPEND_ANNOTATION
from klutch_gitops.config import Bot, GitCredentialsRef, RepositorySpec, SecretRef, WriteBack
from klutch_gitops.errors import KlutchError
from klutch_gitops.models.binding import RepositoryBindingSpec
from klutch_gitops.models.problems import problem_lines

# The Secret references of a spec; each names a Secret of the binding's own namespace.
SECRET_REFS = ("credentialsSecretRef", "webhookSecretRef", "forgeTokenSecretRef")


def from_repository_binding(obj: Mapping[str, Any]) -> RepositorySpec:
    """A RepositoryBinding as a registration; its Secret references live in its own namespace."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "")
    origin = f"RepositoryBinding {namespace}/{meta.get('name')}"
    try:
        spec = RepositoryBindingSpec.model_validate(_without_namespaces(obj.get("spec")))
    except ValidationError as error:
        lines = problem_lines(error, RepositoryBindingSpec, "spec")
        raise KlutchError(
            f"{origin}: " + "; ".join(lines), "fix the RepositoryBinding's spec"
        ) from None
    return _registration(spec, namespace, str(meta.get("name")), origin, _suspended(meta))


def _registration(
    spec: RepositoryBindingSpec, namespace: str, name: str, origin: str, annotated: bool
) -> RepositorySpec:
    def own(ref_name: str, key: str) -> SecretRef:
        return SecretRef(namespace=namespace, name=ref_name, key=key)

    author = spec.write_back.author
    return RepositorySpec(
        name=f"{namespace}.{name}"[:63].rstrip("-."),
        url=spec.url,
        consumer_namespace=namespace,
        app_namespaces=tuple(spec.app_namespaces),
        app_kubeconfig=own(
            spec.app_cluster.kubeconfig_secret_ref.name, spec.app_cluster.kubeconfig_secret_ref.key
        ),
        control_plane_kubeconfig=own(
            spec.control_plane.kubeconfig_secret_ref.name,
            spec.control_plane.kubeconfig_secret_ref.key,
        ),
        branch=spec.branch,
        path=spec.path,
        credentials=GitCredentialsRef(
            secret=SecretRef(namespace=namespace, name=spec.credentials_secret_ref.name)
        )
        if spec.credentials_secret_ref
        else None,
        webhook_secret=own(spec.webhook_secret_ref.name, spec.webhook_secret_ref.key)
        if spec.webhook_secret_ref
        else None,
        forge_token=own(spec.forge_token_secret_ref.name, spec.forge_token_secret_ref.key)
        if spec.forge_token_secret_ref
        else None,
        write_back=WriteBack(
            mode=spec.write_back.mode,
            branch=spec.write_back.branch,
            author=Bot(author.name, author.email)
            if author and author.name and author.email
            else None,
        ),
        poll_interval=spec.poll_interval,
        suspend=spec.suspend or annotated,  # the annotation suspends like the field
        app_sync=spec.app_sync,
        source=origin,
    )


def _suspended(meta: Mapping[str, Any]) -> bool:
    """The SUSPEND annotation says "true" (any case); anything else, or none, does not suspend."""
    value = (meta.get("annotations") or {}).get(SUSPEND_ANNOTATION, "")
    return str(value).strip().lower() == "true"


def _without_namespaces(spec: Any) -> Any:
    """The spec without a ``namespace`` in its Secret references: the CRD prunes it, an older CRD
    might not, and a tenant's reference never points at another tenant's Secret."""
    if not isinstance(spec, Mapping):
        return spec
    cleaned = dict(spec)
    for key in SECRET_REFS:
        cleaned[key] = _drop_namespace(spec.get(key))
    for key in ("appCluster", "controlPlane"):
        access = spec.get(key)
        if isinstance(access, Mapping) and "kubeconfigSecretRef" in access:
            cleaned[key] = {
                **access,
                "kubeconfigSecretRef": _drop_namespace(access["kubeconfigSecretRef"]),
            }
    return {k: v for k, v in cleaned.items() if k in spec}


def _drop_namespace(ref: Any) -> Any:
    if isinstance(ref, Mapping):
        return {k: v for k, v in ref.items() if k != "namespace"}
    return ref
