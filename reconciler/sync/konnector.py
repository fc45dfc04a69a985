"""Klutch's konnector serving an App kind for another consumer namespace: detected, not fought.

The konnector syncs every App object of a bound kind (its informer has no selector) into the
namespace the Control Plane maps for *its* consumer namespace: the namespace of the current
context of the kubeconfig in the Secret that the APIServiceBinding's ``spec.kubeconfigSecretRef``
names (anynines/klutchio bind/pkg/konnector/konnector_reconcile.go ``reconcile``; the Secret is
read as controllers/servicebinding/servicebinding_reconcile.go ``ensureValidKubeconfigSecret``
reads it; the spec sync is controllers/cluster/serviceexport/spec/spec_reconcile.go). The
reconciler maps the same way (``klutch_gitops.apis.mapped_namespace``), so for the same consumer
namespace one App claim is one Control Plane claim. For another one, both would write every claim
of that kind: two Control Plane claims, two real data services. This module only decides; the
reads are in ``kinds.py``.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from klutch_gitops.errors import KlutchError
from klutch_gitops.tenant_kubeconfig import load
from reconciler.manifests import Claim
from reconciler.sync.outcome import Foreign

DEFAULT_KEY = "kubeconfig"  # Klutch's LocalSecretKeyRef allows only this key


class State(enum.Enum):
    NONE = "none"  # no APIServiceBinding for the kind: no konnector serves it
    UNKNOWN = "unknown"  # one exists, but the consumer namespace it uses could not be read
    SAME = "same"  # it uses our consumer namespace: the shared mapping, one claim
    FOREIGN = "foreign"  # another consumer namespace: both would write every claim


@dataclass(frozen=True)
class SecretRef:
    namespace: str
    name: str
    key: str = DEFAULT_KEY

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Verdict:
    state: State
    message: str = ""
    fix: str = ""

    @property
    def conflict(self) -> bool:
        return self.state is State.FOREIGN


def secret_ref(binding: Mapping[str, Any]) -> SecretRef | None:
    """The kubeconfig Secret an APIServiceBinding names, or None when it names none."""
    ref = (binding.get("spec") or {}).get("kubeconfigSecretRef")
    if not isinstance(ref, Mapping):
        return None
    fields = (ref.get("namespace"), ref.get("name"), ref.get("key") or DEFAULT_KEY)
    namespace, name, key = (v if isinstance(v, str) else "" for v in fields)
    if not (namespace and name and key):
        return None
    return SecretRef(namespace, name, key)


def context_namespace(kubeconfig: bytes) -> str | None:
    """The namespace of the kubeconfig's current context — what the konnector takes as its
    consumer namespace — or None where it has none (the konnector then syncs nothing).

    Bounded, safe YAML and nothing else read: the kubeconfig holds the binder's token."""
    try:
        document = load(kubeconfig.decode())
    except (UnicodeDecodeError, KlutchError):
        return None
    if not isinstance(document, Mapping):
        return None
    current = document.get("current-context")
    for entry in document.get("contexts") or []:
        if isinstance(entry, Mapping) and entry.get("name") == current:
            context = entry.get("context")
            namespace = context.get("namespace") if isinstance(context, Mapping) else None
            return namespace if isinstance(namespace, str) and namespace else None
    return None


def decide(binding: Mapping[str, Any] | None, konnector_consumer: str | None, ours: str) -> Verdict:
    """Whether Klutch's konnector, serving a kind through ``binding``, would write the same
    Control Plane claims as this repository (consumer namespace ``ours``) or other ones.

    ``konnector_consumer``: the consumer namespace the binding's kubeconfig Secret names, None
    when it could not be read (then we cannot tell, and go on as without a konnector)."""
    if binding is None:
        return Verdict(State.NONE)
    if konnector_consumer is None:
        return Verdict(State.UNKNOWN)
    if konnector_consumer == ours:
        return Verdict(State.SAME)
    name = binding["metadata"]["name"]
    ref = secret_ref(binding)
    return Verdict(
        State.FOREIGN,
        message=(
            f"Klutch's konnector serves {name} through the APIServiceBinding {name}, whose "
            f"kubeconfig Secret {ref} uses consumer namespace {konnector_consumer}; this "
            f"repository is registered for consumer namespace {ours}. Both would write every "
            f"{name} claim to the Control Plane (two claims, two data services), so klutch-gitops "
            "applies, prunes and deletes none of this kind until that changes"
        ),
        fix=(
            f"register this repository for consumer namespace {konnector_consumer} instead "
            "(README 'From Klutch', step 1), or stop that konnector's binding: "
            f"kubectl delete apiservicebinding {name} --cascade=orphan"
        ),
    )


def refuse_foreign(
    in_git: tuple[Claim, ...],
    claims: tuple[Claim, ...],
    conflicts: Mapping[str, Verdict],
    export_name: Callable[[Claim], str],
) -> tuple[tuple[Claim, ...], list[Foreign]]:
    """Leave out the claims of a kind a konnector serves for another consumer namespace
    (``conflicts``, by export name), and report each of its documents in Git as refused with
    the reason and the fix."""
    if not conflicts:
        return claims, []
    problems = [
        Foreign(
            file=claim.location.file,
            document=claim.location.document,
            identity=claim.identity,
            message=f"{claim.identity} is not synced: {verdict.message}",
            fix=verdict.fix,
        )
        for claim in in_git
        if (verdict := conflicts.get(export_name(claim))) is not None
    ]
    return tuple(c for c in claims if export_name(c) not in conflicts), problems
