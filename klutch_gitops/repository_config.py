"""Repository registrations: an entry of the reconciler config's ``repositories``, or a
RepositoryBinding a tenant creates, read into a RepositorySpec with every problem reported at once.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from klutch_gitops.apis import SUSPEND_ANNOTATION
from klutch_gitops.config import Bot, RepositorySpec, SecretRef, WriteBack
from klutch_gitops.errors import KlutchError
from klutch_gitops.settings import NAME_PATTERN, FieldReader
from klutch_gitops.urls import (
    TENANT_TRANSPORTS,
    InvalidRepoURL,
    check_branch,
    check_repo_path,
    url_transport,
)

URL_PATTERN = re.compile(r"^(file://|https://|http://|ssh://|[\w.-]+@[\w.-]+:)")
URL_FIX = "use a file://, https://, ssh:// or git@host:path URL"
# A repository's name is also a label value on every object it creates, so dots are fine.
REPOSITORY_NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
WRITE_BACK_MODES = ("inline", "files", "branch")
# Who applies a repository's claims to the App Cluster: the reconciler, or Argo CD / Flux.
APP_SYNC_MODES = ("reconciler", "external")
REPOSITORY_FIELDS = {
    "name",
    "url",
    "branch",
    "path",
    "consumerNamespace",
    "appNamespaces",
    "appCluster",
    "controlPlane",
    "credentials",
    "webhookSecret",
    "forgeToken",
    "writeBack",
    "pollInterval",
    "suspend",
    "appSync",
}


def read_repository(reader: FieldReader, data: Any, where: str) -> RepositorySpec | None:
    data = reader.mapping(data, where, REPOSITORY_FIELDS)
    before = len(reader.problems)
    name = reader.string(
        data,
        "name",
        where,
        required=True,
        pattern=REPOSITORY_NAME_PATTERN,
        fix="use lowercase letters, digits, '-' and '.', at most 63",
    )
    url = reader.string(data, "url", where, required=True, pattern=URL_PATTERN, fix=URL_FIX)
    consumer = reader.string(
        data,
        "consumerNamespace",
        where,
        required=True,
        pattern=NAME_PATTERN,
        fix="name the consumer namespace on the Control Plane",
    )
    namespaces = _app_namespaces(reader, data, where)
    app = reader.kubeconfig(data.get("appCluster"), f"{where}.appCluster")
    control_plane = reader.kubeconfig(data.get("controlPlane"), f"{where}.controlPlane")
    path = _claims_path(reader, data, where)
    app_sync = _app_sync(reader, data, where)
    spec = RepositorySpec(
        name=name or "",
        url=url or "",
        consumer_namespace=consumer or "",
        app_namespaces=namespaces,
        app_kubeconfig=app or SecretRef(),
        control_plane_kubeconfig=control_plane or SecretRef(),
        branch=reader.string(data, "branch", where, default="main") or "main",
        path=path,
        credentials=reader.credentials(data.get("credentials"), f"{where}.credentials"),
        webhook_secret=reader.secret_ref(data.get("webhookSecret"), f"{where}.webhookSecret"),
        forge_token=reader.secret_ref(data.get("forgeToken"), f"{where}.forgeToken"),
        write_back=read_write_back(reader, data.get("writeBack"), f"{where}.writeBack"),
        poll_interval=reader.duration(data, "pollInterval", where),
        suspend=bool(data.get("suspend", False)),
        app_sync=app_sync,
    )
    return spec if len(reader.problems) == before else None


def _app_namespaces(reader: FieldReader, data: Mapping[str, Any], where: str) -> tuple[str, ...]:
    namespaces = data.get("appNamespaces")
    if (
        not isinstance(namespaces, list)
        or not namespaces
        or not all(isinstance(n, str) and NAME_PATTERN.match(n) for n in namespaces)
    ):
        reader.problem(
            f"{where}.appNamespaces",
            "must be a non-empty list of namespace names",
            "list the App Cluster namespaces this repository may write to",
        )
        return ()
    return tuple(namespaces)


def _claims_path(reader: FieldReader, data: Mapping[str, Any], where: str) -> str:
    path = reader.string(data, "path", where, default=".") or "."
    if Path(path).is_absolute() or ".." in Path(path).parts:
        reader.problem(
            f"{where}.path",
            f"{path!r} leaves the repository",
            "use a folder inside the repository, e.g. claims/",
        )
    return path


def _app_sync(reader: FieldReader, data: Mapping[str, Any], where: str) -> str:
    app_sync = reader.string(data, "appSync", where, default="reconciler")
    if app_sync is not None and app_sync not in APP_SYNC_MODES:
        reader.problem(
            f"{where}.appSync",
            f"{app_sync!r} is not an App Cluster sync mode",
            "use reconciler (the default), or external when Argo CD or Flux applies the claims",
        )
    return app_sync or "reconciler"


def read_write_back(reader: FieldReader, data: Any, where: str) -> WriteBack:
    data = reader.mapping(data, where, {"mode", "branch", "author"})
    mode = reader.string(data, "mode", where, default="inline")
    if mode and mode not in WRITE_BACK_MODES:
        reader.problem(
            f"{where}.mode",
            f"{mode!r} is not a write-back mode",
            f"use one of {', '.join(WRITE_BACK_MODES)}",
        )
        mode = "inline"
    author = None
    if data.get("author") is not None:
        raw = reader.mapping(data["author"], f"{where}.author", {"name", "email"})
        name = reader.string(raw, "name", f"{where}.author", required=True)
        email = reader.string(raw, "email", f"{where}.author", required=True)
        author = Bot(name, email) if name and email else None
    return WriteBack(
        mode=mode or "inline",
        branch=reader.string(data, "branch", where, default="klutch-status") or "klutch-status",
        author=author,
    )


def from_repository_binding(obj: Mapping[str, Any]) -> RepositorySpec:
    """A RepositoryBinding as a registration; its Secret references live in its own namespace."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "")
    reader = FieldReader(f"RepositoryBinding {namespace}/{meta.get('name')}", Path("/"))
    entry = _binding_entry(namespace, meta.get("name"), dict(obj.get("spec") or {}))
    if _suspend_annotated(meta):
        entry["suspend"] = True  # the annotation suspends like the field
    result = read_repository(reader, entry, "spec")
    if result is not None:
        _check_tenant_repository(reader, result)
    if result is None or reader.problems:
        raise KlutchError(
            f"{reader.origin}: " + "; ".join(reader.problems), "fix the RepositoryBinding's spec"
        )
    return RepositorySpec(**{**result.__dict__, "source": reader.origin})


def _suspend_annotated(meta: Mapping[str, Any]) -> bool:
    """The SUSPEND annotation says "true" (any case); anything else, or none, does not suspend."""
    value = (meta.get("annotations") or {}).get(SUSPEND_ANNOTATION, "")
    return str(value).strip().lower() == "true"


def _binding_entry(namespace: str, name: Any, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A RepositoryBinding's spec as a config file's repository entry."""
    entry = {
        "name": f"{namespace}.{name}"[:63].rstrip("-."),
        "url": spec.get("url"),
        "branch": spec.get("branch", "main"),
        "path": spec.get("path", "."),
        "consumerNamespace": namespace,
        "appNamespaces": spec.get("appNamespaces"),
        "appCluster": {"kubeconfigSecretRef": {"namespace": namespace, **_ref(spec, "appCluster")}},
        "controlPlane": {
            "kubeconfigSecretRef": {"namespace": namespace, **_ref(spec, "controlPlane")}
        },
        "writeBack": spec.get("writeBack") or {},
        "suspend": spec.get("suspend", False),
        "appSync": spec.get("appSync", "reconciler"),
    }
    if spec.get("credentialsSecretRef"):
        entry["credentials"] = {
            "secretRef": {"namespace": namespace, "name": spec["credentialsSecretRef"].get("name")}
        }
    if spec.get("webhookSecretRef"):
        entry["webhookSecret"] = {"secretRef": _own_secret(spec["webhookSecretRef"], namespace)}
    if spec.get("forgeTokenSecretRef"):
        ref = {"key": "token", **spec["forgeTokenSecretRef"]}
        entry["forgeToken"] = {"secretRef": _own_secret(ref, namespace)}
    if spec.get("pollInterval"):
        entry["pollInterval"] = spec["pollInterval"]
    return entry


def _check_tenant_repository(reader: FieldReader, spec: RepositorySpec) -> None:
    """A tenant's registration: https or ssh only (file:// would read any repository the
    reconciler can), and a branch and path git and the loader take literally, again here for
    objects that predate the CRD's patterns."""
    try:
        url_transport(spec.url, TENANT_TRANSPORTS)
    except InvalidRepoURL as error:
        reader.problem("spec.url", error.message, error.fix)
    for where, branch in (
        ("spec.branch", spec.branch),
        ("spec.writeBack.branch", spec.write_back.branch),
    ):
        if problem := check_branch(branch):
            reader.problem(
                where, f"{branch!r} {problem}", "name a branch git check-ref-format accepts"
            )
    if problem := check_repo_path(spec.path):
        reader.problem(
            "spec.path",
            f"{spec.path!r} {problem}",
            "use a folder inside the repository, e.g. claims",
        )


def _own_secret(ref: Mapping[str, Any], namespace: str) -> dict[str, Any]:
    """A tenant's Secret reference, always into its own namespace: a ``namespace`` key in the
    object (the CRD prunes it, an older CRD might not) never points at another tenant's Secret."""
    return {**{k: ref[k] for k in ("name", "key") if k in ref}, "namespace": namespace}


def _ref(spec: Mapping[str, Any], key: str) -> dict[str, Any]:
    ref = ((spec.get(key) or {}).get("kubeconfigSecretRef")) or {}
    return {"name": ref.get("name"), "key": ref.get("key", "kubeconfig")}
