"""A RepositoryBinding a tenant creates, read into a RegistrationSpec: its spec validated by
``models.binding.RepositoryBindingSpec`` (the CRD's own source), every problem reported at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from klutch_gitops.apis import SUSPEND_ANNOTATION
from klutch_gitops.config import RegistrationSpec
from klutch_gitops.errors import KlutchError
from klutch_gitops.models.binding import RepositoryBindingSpec
from klutch_gitops.models.problems import problem_lines
from klutch_gitops.models.registration import registration_name, registration_spec

# The Secret references of a spec; each names a Secret of the binding's own namespace.
SECRET_REFS = ("credentialsSecretRef", "webhookSecretRef", "forgeTokenSecretRef")


def from_repository_binding(obj: Mapping[str, Any]) -> RegistrationSpec:
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
    return registration_spec(
        spec,
        spec.references(namespace),
        name=registration_name(meta),
        consumer_namespace=namespace,
        suspend=_suspended(meta),  # the annotation suspends like the field
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
