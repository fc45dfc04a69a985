"""Stage: serve every exported kind in the App Cluster, and tell whose konnector serves it.

Each APIServiceExport becomes an App Cluster CRD (never by taking over a foreign one), gets an
informer for its claims, and gets a ``konnector.Verdict``: which consumer namespace Klutch's
konnector, if one serves the kind, writes for. The reads behind a verdict are here; the decision
is ``konnector.decide``.
"""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

from klutch_gitops.kube.client import KubeError
from reconciler.manifests import Export
from reconciler.sync import app_crds, konnector, objects
from reconciler.sync.outcome import Failed
from reconciler.sync.view import View

log = logging.getLogger(__name__)


def serve_exported_kinds(
    view: View, raw_exports: list[dict[str, Any]], path: str, consumer_namespace: str
) -> tuple[dict[str, konnector.Verdict], list[Failed]]:
    """The konnector verdict of each export (by name), and the CRDs left alone as problems."""
    verdicts: dict[str, konnector.Verdict] = {}
    problems: list[Failed] = []
    for raw in raw_exports:
        name = raw["metadata"]["name"]
        service_binding = view.service_binding(name)
        verdicts[name] = konnector_verdict(view, service_binding, consumer_namespace)
        crd = app_crds.crd_from_export(raw, service_binding)
        live = view.app_crd(crd["metadata"]["name"])
        if not app_crds.owns_crd(live, service_binding):
            problems.append(foreign_crd(crd["metadata"]["name"], path))
        elif objects.needs_apply(crd, live):
            view.serve_crd(crd)
        view.watch_kind(Export.of(raw))
    if raw_exports:
        view.watch_service_bindings()
    return verdicts, problems


def foreign_crd(name: str, path: str) -> Failed:
    return Failed(
        file=path,
        message=(
            f"CustomResourceDefinition {name} in the App Cluster is not managed by "
            "klutch-gitops; it is left as it is"
        ),
        fix="delete that CRD, or use the APIs it serves without klutch-gitops",
    )


def konnector_verdict(
    view: View, service_binding: dict[str, Any] | None, consumer_namespace: str
) -> konnector.Verdict:
    """Which consumer namespace the konnector behind ``service_binding`` writes for."""
    if service_binding is None:
        return konnector.decide(None, None, consumer_namespace)
    consumer, why = konnector_consumer(view, service_binding)
    verdict = konnector.decide(service_binding, consumer, consumer_namespace)
    return konnector.Verdict(verdict.state, verdict.message or why, verdict.fix)


def konnector_consumer(view: View, service_binding: dict[str, Any]) -> tuple[str | None, str]:
    """The consumer namespace the binding's kubeconfig Secret names, or None and why not.
    The Secret's content stays in this function: it holds the binder's token."""
    name = service_binding["metadata"]["name"]
    ref = konnector.secret_ref(service_binding)
    if ref is None:
        return None, f"APIServiceBinding {name} names no kubeconfigSecretRef"
    try:
        secret = view.app_secret(ref.namespace, ref.name)
    except KubeError as error:
        if error.status != 403:
            raise
        return None, f"the App Cluster credentials may not read Secret {ref}"
    if secret is None:
        return None, f"Secret {ref} does not exist"
    encoded = (secret.get("data") or {}).get(ref.key)
    try:
        consumer = konnector.context_namespace(base64.b64decode(encoded or "", validate=True))
    except binascii.Error:
        consumer = None
    if consumer is None:
        return None, f"key {ref.key!r} of Secret {ref} names no current-context namespace"
    return consumer, ""


def log_verdicts(
    repository: str, verdicts: dict[str, konnector.Verdict], logged: dict[str, str]
) -> None:
    """Say once per change what was found: a conflict, or that we cannot tell. ``logged``
    (export name -> what was last said) is kept by the caller between passes."""
    for name in set(logged) - set(verdicts):
        logged.pop(name)
    for name, verdict in verdicts.items():
        said = f"{verdict.state.value}: {verdict.message}"
        if logged.get(name) == said:
            continue
        logged[name] = said
        extra = {"repository": repository, "export": name, "reason": verdict.message}
        if verdict.conflict:
            log.warning("konnector conflict", extra={**extra, "fix": verdict.fix})
        elif verdict.state is konnector.State.UNKNOWN:
            log.info(
                "an APIServiceBinding exists, but the consumer namespace of its konnector "
                "cannot be told; syncing as usual",
                extra=extra,
            )
