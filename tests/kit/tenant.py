"""A tenant: a consumer bound on the Control Plane, an App namespace, a Git remote with a
person's clone, and a reconciler configured to follow it; and what reads a tenant's end state
the way a person would (``reconciled``, ``mirrored``)."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from klutch_gitops.apis import REPOSITORY_BINDINGS, mapped_namespace
from klutch_gitops.config import Config, GitCredentialsRef, RegistrationSpec, SecretRef, WriteBack
from klutch_gitops.config_file import config_from
from klutch_gitops.consumer import bind_consumer, binder_kubeconfig
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.crds import install_crds, load_crds
from reconciler.manager import Reconciler
from reconciler.sync import objects
from reconciler.sync.notes import NOTES_REF

from .claims import CLAIM_CRDS, live_claims, ready_status, write_status
from .git import git, new_remote, person_clone

WEBHOOK_SECRET = "s3cr3t-webhook"  # a test repository's, not a real one
QUICK = {"poll_interval": 1.0, "batch_window": 0.3, "workers": 2}  # tests do not wait 30 s


@dataclass(frozen=True)
class Origin:
    """A repository on a Git server (say, Gitea) instead of the tenant's own bare repository."""

    url: str  # the reconciler's: no credentials in it
    person_url: str  # the person's clone, credentials in it
    bare: Path  # where the server keeps it on disk
    credentials: GitCredentialsRef
    forge_token: SecretRef


@dataclass
class Tenant:
    app: Kube
    control_plane: Kube
    consumer: str
    namespace: str  # the App namespace
    remote: Path
    clone: Path
    config: Config

    @property
    def mapped(self) -> str:
        return mapped_namespace(self.consumer, self.namespace)

    @property
    def spec(self) -> RegistrationSpec:
        return self.config.repositories[0]

    @cached_property
    def reconciler(self) -> Reconciler:
        """The in-process reconciler of ``config``, made when first asked for (a test or
        benchmark that runs its own processes never makes one)."""
        return Reconciler(self.config)

    def push(self, files: Mapping[str, str | None], message: str = "change claims") -> str:
        """Make the change on top of the remote's newest commit and push it; when a status
        commit lands in between, make it again on top of that, as a person would."""
        for _ in range(10):
            git(self.clone, "fetch", "-q", "origin", "main")
            git(self.clone, "reset", "-q", "--hard", "origin/main")
            for name, text in files.items():
                path = self.clone / name
                if text is None:
                    path.unlink(missing_ok=True)
                else:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text)
            git(self.clone, "add", "-A")
            git(self.clone, "commit", "-q", "-m", message)
            try:
                git(self.clone, "push", "-q", "origin", "HEAD:main")
                return git(self.clone, "rev-parse", "HEAD")
            except subprocess.CalledProcessError:
                time.sleep(0.2)
        raise AssertionError("the push was rejected ten times in a row")

    def pull(self) -> None:
        git(self.clone, "pull", "-q", "--rebase", "origin", "main")

    def remote_file(self, name: str, ref: str = "main") -> str:
        return git(self.remote, "show", f"{ref}:{name}")

    def log(self, ref: str = "main") -> list[str]:
        return git(self.remote, "log", "--format=%H %an %s", ref).splitlines()


def make_tenant(
    stack: StackInfo,
    clusters: Mapping[str, client.ApiClient],
    tmp_path: Path,
    mode: str = "inline",
    claim_crds: list[dict[str, Any]] | None = None,
    app_sync: str = "reconciler",
    origin: Origin | None = None,
    start: bool = True,
    *,
    seed: Callable[[str], Mapping[str, str]] | None = None,
    quick: bool = True,
    crds_installed: bool = False,
) -> Tenant:
    """A bound consumer with a repository and a reconciler (started unless ``start=False``: the
    test runs its own replicas), everything on disk in ``tmp_path``; its exports are the
    stand-in claim CRDs, or ``claim_crds`` (e.g. the ones Crossplane made from the catalog).
    ``app_sync="external"``: a stand-in for Argo CD or Flux applies the claims (the test).
    ``origin``: the repository lives on a Git server, not in a bare repository of its own.
    ``seed``: the first commit's files ({path: text}) for the App namespace it is given.
    ``quick=False``: the product's poll interval, batch window and workers (a benchmark's).
    ``crds_installed``: the Control Plane serves the CRDs already (one install for a fleet)."""
    admin, app = Kube(clusters["control-plane"]), Kube(clusters["app"])
    if not crds_installed:
        own = [] if claim_crds else CLAIM_CRDS
        install_crds(clusters["control-plane"], load_crds(cluster="control-plane") + own)
    suffix = uuid.uuid4().hex[:6]
    consumer, namespace = f"cluster-{suffix}", f"team-{suffix}"
    client.CoreV1Api(clusters["app"]).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    binder = bind(admin, consumer, f"developer#{suffix}", claim_crds or CLAIM_CRDS, tmp_path)

    remote, clone = tmp_path / "team.git", tmp_path / "human"
    if origin is None:
        url, person_url = f"file://{new_remote(remote)}", str(remote)
    else:
        remote, url, person_url = origin.bare, origin.url, origin.person_url
    person_clone(person_url, clone, seed(namespace) if seed else None)

    spec = RegistrationSpec(
        name=f"team-{suffix}",
        url=url,
        consumer_namespace=consumer,
        app_namespaces=(namespace,),
        branch="main",
        path="claims",
        app_kubeconfig=SecretRef(file=Path(stack.clusters["app"].kubeconfig)),
        control_plane_kubeconfig=SecretRef(file=binder),
        webhook_secret=SecretRef(file=_write(tmp_path / "webhook", WEBHOOK_SECRET)),
        credentials=origin.credentials if origin else None,
        forge_token=origin.forge_token if origin else None,
        write_back=WriteBack(mode=mode, branch="klutch-status", author=None),
        poll_interval=None,
        suspend=False,
        app_sync=app_sync,
    )
    config = (quick_config if quick else local_config)(stack, tmp_path, repositories=(spec,))
    tenant = Tenant(app, admin, consumer, namespace, remote, clone, config)
    if start:
        tenant.reconciler.start()
    return tenant


def bind(
    admin: Kube, consumer: str, identity: str, exports: list[dict[str, Any]], directory: Path
) -> Path:
    """Bind ``consumer`` the way the bind API does; its binder kubeconfig, written to a file
    that only its owner reads."""
    bind_consumer(admin, consumer, identity, exports)
    binder = directory / "binder.kubeconfig"
    binder.touch(mode=0o600)
    binder.write_text(yaml.safe_dump(binder_kubeconfig(admin, consumer)))
    return binder


def local_config(stack: StackInfo, tmp_path: Path, **fields: Any) -> Config:
    """A reconciler config on the stack: its Control Plane as admin, a free loopback port, a
    work directory in ``tmp_path``, the product's defaults otherwise; ``fields`` add or
    override."""
    return config_from(
        Path(stack.clusters["control-plane"].kubeconfig),
        **{"listen": f"127.0.0.1:{free_port()}", "work_dir": tmp_path / "work", **fields},
    )


def quick_config(stack: StackInfo, tmp_path: Path, **fields: Any) -> Config:
    """A reconciler config for a test: ``local_config`` with one-second polls and a short batch
    window; ``fields`` add or override."""
    return local_config(stack, tmp_path, **{**QUICK, **fields})


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def repository_entry(spec: RegistrationSpec) -> dict[str, Any]:
    """A registration as the config file spells it (kubeconfigs and secrets as files)."""
    entry: dict[str, Any] = {
        "name": spec.name,
        "url": spec.url,
        "branch": spec.branch,
        "path": spec.path,
        "consumerNamespace": spec.consumer_namespace,
        "appNamespaces": list(spec.app_namespaces),
        "appCluster": {"kubeconfig": str(spec.app_kubeconfig.file)},
        "controlPlane": {"kubeconfig": str(spec.control_plane_kubeconfig.file)},
        "writeBack": {"mode": spec.write_back.mode},
        "appSync": spec.app_sync,
    }
    if spec.webhook_secret is not None:
        entry["webhookSecret"] = {"file": str(spec.webhook_secret.file)}
    return entry


def repository_binding(
    namespace: str,
    name: str,
    url: str,
    app_namespace: str,
    *,
    app_ref: str = "app-cluster",
    binder_ref: str = "binder",
    path: str | None = "claims",
) -> dict[str, Any]:
    """A RepositoryBinding in the consumer ``namespace`` that registers ``url`` for one App
    namespace, with the kubeconfig Secrets a test created there."""
    spec: dict[str, Any] = {
        "url": url,
        **({"path": path} if path else {}),
        "appNamespaces": [app_namespace],
        "appCluster": {"kubeconfigSecretRef": {"name": app_ref}},
        "controlPlane": {"kubeconfigSecretRef": {"name": binder_ref}},
    }
    return {
        "apiVersion": REPOSITORY_BINDINGS.api_version,
        "kind": "RepositoryBinding",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def report_ready(tenant: Tenant, name: str) -> None:
    """What a provider does: write Ready into the Control Plane copy's status."""
    write_status(tenant.control_plane, name, tenant.mapped, ready_status())


def reconciled(tenant: Tenant) -> str | None:
    """The newest commit on main that the tenant's registration noted as reconciled (its git
    note under refs/notes/klutch-gitops, reconciler/sync/notes.py); None before the first."""
    try:
        listed = git(tenant.remote, "notes", f"--ref={NOTES_REF}", "list").split()
    except subprocess.CalledProcessError:
        return None
    annotated = set(listed[1::2])  # "<note> <annotated commit>" per line
    if not annotated:
        return None
    for sha in git(tenant.remote, "rev-list", "--first-parent", "main").split():
        if sha in annotated:
            note = git(tenant.remote, "notes", f"--ref={NOTES_REF}", "show", sha)
            if tenant.spec.name in (yaml.safe_load(note) or {}):
                return sha
    return None


def mirrored(tenant: Tenant, expected: Mapping[str, dict]) -> bool:
    """Every claim of ``expected`` and nothing else in the App namespace and in the mapped
    Control Plane namespace (no orphan), with Git's spec; every App copy holds the finalizer and
    none is stuck deleting. An AssertionError says what differs, so ``eventually`` can retry."""
    app, cp = (
        live_claims(tenant.app, tenant.namespace),
        live_claims(tenant.control_plane, tenant.mapped),
    )
    for where, live in (("App Cluster", app), ("Control Plane", cp)):
        extra, missing = sorted(live.keys() - expected.keys()), sorted(expected.keys() - live)
        assert not extra, f"{where}: orphans {extra}"
        assert not missing, f"{where}: missing {missing}"
        for name, doc in expected.items():
            meta = live[name]["metadata"]
            assert not meta.get("deletionTimestamp"), f"{where}: {name} is being deleted"
            differs = {k for k, v in doc["spec"].items() if live[name]["spec"].get(k) != v}
            assert not differs, f"{where}: {name} differs from Git in {sorted(differs)}"
    for name, obj in app.items():
        assert objects.FINALIZER in (obj["metadata"].get("finalizers") or []), name
    return True
