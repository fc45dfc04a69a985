"""A cluster from a kubeconfig the way kubectl picks it, and API errors a person can act on.

``--kubeconfig`` else ``$KUBECONFIG`` (``:``-separated files, merged) else ``~/.kube/config``;
``--context`` else the current context; the namespace ``-n`` else the context's else
``default`` (kubectl's order: k8s.io/client-go/tools/clientcmd/client_config.go, Namespace()).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import config
from urllib3.exceptions import HTTPError

from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError, Resource

CHART_ROLES = (
    "the chart's aggregated ClusterRoles klutch-gitops-repositorybindings-view and -edit grant "
    "them to whoever holds view or edit in the namespace; a tenant's binder kubeconfig has them "
    "in its consumer namespace"
)
# What the kubernetes client's loader raises for a kubeconfig it cannot read or use.
_BAD_KUBECONFIG = (OSError, config.ConfigException, yaml.YAMLError, TypeError, KeyError, ValueError)
# What a call can fail with: the server's answer, or no answer.
CALL_ERRORS = (KubeError, HTTPError, OSError)


@dataclass(frozen=True)
class Cluster:
    """One cluster and the namespace a command works in when none is given."""

    kube: Kube
    namespace: str
    context: str


def connect(kubeconfig: Path | None, context: str | None, namespace: str | None) -> Cluster:
    """The cluster of ``context`` in ``kubeconfig``; a missing file or context is a KlutchError."""
    files = str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG") or "~/.kube/config"
    if kubeconfig is not None and not kubeconfig.is_file():
        raise KlutchError(f"no kubeconfig at {kubeconfig}", "pass --kubeconfig with a file")
    if not any(Path(f).expanduser().is_file() for f in files.split(os.pathsep) if f):
        source = "$KUBECONFIG" if "KUBECONFIG" in os.environ else "the default path"
        raise KlutchError(
            f"no kubeconfig at {files} ({source})",
            "pass --kubeconfig FILE, or set $KUBECONFIG, or write ~/.kube/config",
        )
    try:
        contexts, current = config.list_kube_config_contexts(config_file=files)
    except _BAD_KUBECONFIG as error:
        raise KlutchError(
            f"cannot load a kubeconfig: {error}",
            "pass --kubeconfig FILE, or set $KUBECONFIG, or write ~/.kube/config",
        ) from None
    chosen = _context(contexts or [], current, context)
    try:
        api = config.new_client_from_config(config_file=files, context=chosen["name"])
    except _BAD_KUBECONFIG as error:
        raise KlutchError(
            f"cannot use context {chosen['name']}: {error}", "fix the context in the kubeconfig"
        ) from None
    default = (chosen.get("context") or {}).get("namespace") or "default"
    return Cluster(Kube(api, timeout=15.0), namespace or default, chosen["name"])


def _context(
    contexts: list[dict[str, Any]], current: dict[str, Any] | None, name: str | None
) -> dict[str, Any]:
    if name is None:
        if not current:
            raise KlutchError("the kubeconfig has no current context", "pass --context NAME")
        return current
    for candidate in contexts:
        if candidate.get("name") == name:
            return candidate
    known = ", ".join(sorted(c.get("name", "") for c in contexts)) or "none"
    raise KlutchError(f"no context {name} in the kubeconfig (it has: {known})", "fix --context")


def refused(error: Exception, verb: str, resource: Resource, namespace: str | None) -> KlutchError:
    """The one-line error for a failed call: unreachable, forbidden, missing kind, or other."""
    where = f" in namespace {namespace}" if namespace else " in all namespaces"
    what = f"{resource.plural}.{resource.group}" if resource.group else resource.plural
    if isinstance(error, (HTTPError, OSError)):
        return KlutchError(
            f"cannot reach the cluster: {error}",
            "check the kubeconfig's server, --context, and your network",
        )
    if not isinstance(error, KubeError):
        raise TypeError(f"not a Kubernetes call error: {error!r}")
    if error.status in (401, 403):
        return KlutchError(
            f"forbidden: you may not {verb} {what}{where} ({error.message})",
            f"ask for {verb} on {what}{where}: {CHART_ROLES}",
        )
    if error.not_found:
        return KlutchError(
            f"{what} not found{where}: {error.message}",
            "check the name and -n NAMESPACE, and that the cluster serves the kind "
            "(the chart installs its CRD on the Control Plane)",
        )
    return KlutchError(f"cannot {verb} {what}{where}: {error}", "retry, or check the cluster")
