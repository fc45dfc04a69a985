"""The App Cluster's side of a binding: the cluster's identity, and the ``klutch-bind``
Namespace, kubeconfig Secret and APIServiceBindings applied there, written for Git, or removed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import urllib3
import yaml

from klutch_gitops.apis import API_SERVICE_BINDINGS
from klutch_gitops.bind import client as bind_client
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError, api_client
from klutch_gitops.kube.resources import NAMESPACES, SECRETS


def app_kube(kubeconfig: Path | None, context: str | None) -> Kube:
    """The App Cluster: ``--kubeconfig``, else $KUBECONFIG or ~/.kube/config like kubectl."""
    from kubernetes import config

    try:
        if kubeconfig is not None:
            return Kube(api_client(kubeconfig, context))
        return Kube(config.new_client_from_config(context=context))
    except (OSError, config.ConfigException) as error:
        raise KlutchError(
            f"cannot load the App Cluster kubeconfig: {error}", "check --kubeconfig and --context"
        ) from None


def answering(kube: Kube) -> Kube:
    """``kube`` once it answered at all (a refusal is an answer): an App Cluster that cannot be
    reached fails the command before anything is bound or unbound."""
    try:
        kube.get(NAMESPACES, None, "kube-system")
    except KubeError:
        pass
    except urllib3.exceptions.HTTPError as error:
        reason = getattr(error, "reason", None) or error
        raise KlutchError(
            f"cannot reach the App Cluster at {kube.api.configuration.host}: {reason}",
            "check --kubeconfig and --context, and that the cluster runs",
        ) from None
    return kube


def identity(kube: Kube | None) -> str:
    """kube-bind's cluster identity: the UID of the App Cluster's kube-system namespace."""
    system = kube.get(NAMESPACES, None, "kube-system") if kube else None
    if not system:
        raise KlutchError(
            "cannot tell the App Cluster's identity", "pass --cluster-id, or --kubeconfig"
        )
    uid: str = system["metadata"]["uid"]
    return uid


def apply_app_objects(kube: Kube, objects: list[tuple[Any, dict[str, Any]]]) -> list[str]:
    """Server-side apply (field manager ``klutch-bind``); returns ``kind/namespace/name``."""
    applied = []
    for resource, obj in objects:
        try:
            kube.apply(resource, obj, field_manager=bind_client.FIELD_MANAGER, force=True)
        except KubeError as error:
            fix = "check the kubeconfig's permissions in the App Cluster"
            if error.not_found and resource is API_SERVICE_BINDINGS:
                fix = "install the APIServiceBinding CRD in the App Cluster"
            raise KlutchError(
                f"cannot apply {obj['kind']} {obj['metadata']['name']}: {error}", fix
            ) from None
        applied.append(_ref(obj))
    return applied


def gitops_dir(directory: Path) -> Path:
    """``--gitops-out``, made and writable; checked before anything is bound."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".klutch-bind-probe"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise KlutchError(
            f"cannot write to --gitops-out {directory}: {error.strerror or error}",
            "pass a directory you can write to (it is created if missing)",
        ) from None
    return directory


def write_gitops(directory: Path, files: dict[str, dict[str, Any] | str]) -> list[str]:
    gitops_dir(directory)
    written = []
    for name, content in files.items():
        text = content if isinstance(content, str) else yaml.safe_dump(content, sort_keys=False)
        try:
            (directory / name).write_text(text)
        except OSError as error:
            raise KlutchError(
                f"bound, but cannot write {directory / name}: {error.strerror or error}",
                "free the path and run the same bind again (binding again changes nothing)",
            ) from None
        written.append(str(directory / name))
    return written


def _ref(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    return "/".join(p for p in (obj["kind"], meta.get("namespace"), meta["name"]) if p)


def remove_app_objects(kube: Kube, consumer: str) -> list[str]:
    """Delete the consumer's APIServiceBindings and kubeconfig Secret from the App Cluster."""
    try:
        return _remove(kube, consumer)
    except KubeError as error:
        raise KlutchError(
            f"unbound on the Control Plane, but cannot clean up the App Cluster: {error}",
            "check the kubeconfig's permissions on APIServiceBindings (cluster-wide) and on "
            "Secrets in namespace klutch-bind, then unbind again",
        ) from None


def _remove(kube: Kube, consumer: str) -> list[str]:
    namespace = bind_client.BIND_NAMESPACE
    try:
        items, _ = kube.list(API_SERVICE_BINDINGS)
    except KubeError as error:
        if not error.not_found:  # no CRD: no bindings
            raise
        items = []
    removed = []
    for name in bind_client.bindings_of(consumer, items):
        # Orphan: the App CRD may be owned by the binding (the konnector's ownership model), and
        # its deletion would take every App claim of that kind with it.
        if kube.delete(API_SERVICE_BINDINGS, None, name, propagation="Orphan"):
            removed.append(f"APIServiceBinding/{name}")
    secret = bind_client.secret_name(consumer)
    if kube.delete(SECRETS, namespace, secret):
        removed.append(f"Secret/{namespace}/{secret}")
    return removed
