"""A tenant for reconciler tests: a consumer on the Control Plane, an App namespace, a bare Git
remote with a person's clone, and a running reconciler that follows it."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from klutch_gitops.apis import mapped_namespace
from klutch_gitops.config import Config, GitCredentialsRef, RepositorySpec, SecretRef, WriteBack
from klutch_gitops.consumer import bind_consumer, binder_kubeconfig
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from reconciler.manager import Reconciler

CLAIM_CRDS = load_dev_claim_crds()
POSTGRES = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")
BINDINGS = Resource("anynines.com", "v1", "servicebindings", "ServiceBinding")
WEBHOOK_SECRET = "s3cr3t-webhook"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def eventually(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except AssertionError as error:
            last = error
        else:
            if last:
                return last
        time.sleep(0.1)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


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
    reconciler: Reconciler
    config: Config

    @property
    def mapped(self) -> str:
        return mapped_namespace(self.consumer, self.namespace)

    def push(self, files: dict[str, str | None], message: str = "change claims") -> str:
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
        pytest.fail("the push was rejected ten times in a row")

    def pull(self) -> None:
        git(self.clone, "pull", "-q", "--rebase", "origin", "main")

    def remote_file(self, name: str, ref: str = "main") -> str:
        return git(self.remote, "show", f"{ref}:{name}")

    def log(self, ref: str = "main") -> list[str]:
        return git(self.remote, "log", "--format=%H %an %s", ref).splitlines()


def claim(name: str, namespace: str, plan: str = "postgresql-single-nano", extra: str = "") -> str:
    return f"""# {name}: a database for the team
apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: {name}   # keep this name
  namespace: {namespace}
spec:
  service: a9s-postgresql13
  plan: {plan}
  writeConnectionSecretToRef:
    name: {name}-conn
{extra}"""


def person_clone(source: str, clone: Path) -> None:
    """A person's clone of an empty repository, with a first commit on main pushed."""
    subprocess.run(["git", "clone", "-q", source, str(clone)], check=True, capture_output=True)
    git(clone, "config", "user.name", "Human Developer")
    git(clone, "config", "user.email", "human@example.com")
    git(clone, "checkout", "-q", "-b", "main")
    (clone / "README.md").write_text("team claims\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "start")
    git(clone, "push", "-q", "origin", "main")


def make_tenant(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    tmp_path: Path,
    mode: str = "inline",
    claim_crds: list[dict[str, Any]] | None = None,
    app_sync: str = "reconciler",
    origin: Origin | None = None,
    start: bool = True,
) -> Tenant:
    """A bound consumer with a repository and a running reconciler; its exports are the
    stand-in claim CRDs, or ``claim_crds`` (e.g. the ones Crossplane made from the catalog).
    ``app_sync="external"``: a stand-in for Argo CD or Flux applies the claims (the test).
    ``origin``: the repository lives on a Git server, not in a bare repository of its own.
    ``start=False``: the reconciler is built, not started (the test runs its own replicas)."""
    admin = Kube(clusters["control-plane"])
    app = Kube(clusters["app"])
    install_crds(
        clusters["control-plane"],
        load_crds(cluster="control-plane") + ([] if claim_crds else CLAIM_CRDS),
    )
    suffix = uuid.uuid4().hex[:6]
    consumer, namespace = f"cluster-{suffix}", f"team-{suffix}"
    client.CoreV1Api(clusters["app"]).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
    )
    bind_consumer(admin, consumer, f"developer#{suffix}", claim_crds or CLAIM_CRDS)
    binder = tmp_path / "binder.kubeconfig"
    binder.write_text(yaml.safe_dump(binder_kubeconfig(admin, consumer)))

    remote, clone = tmp_path / "team.git", tmp_path / "human"
    if origin is None:
        subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
        url, person_url = f"file://{remote}", str(remote)
    else:
        remote, url, person_url = origin.bare, origin.url, origin.person_url
    person_clone(person_url, clone)

    spec = RepositorySpec(
        name=f"team-{suffix}",
        url=url,
        consumer_namespace=consumer,
        app_namespaces=(namespace,),
        path="claims",
        app_kubeconfig=SecretRef(file=Path(stack.clusters["app"].kubeconfig)),
        control_plane_kubeconfig=SecretRef(file=binder),
        webhook_secret=SecretRef(file=_write(tmp_path / "webhook", WEBHOOK_SECRET)),
        credentials=origin.credentials if origin else None,
        forge_token=origin.forge_token if origin else None,
        write_back=WriteBack(mode=mode),
        app_sync=app_sync,
    )
    config = quick_config(stack, tmp_path, repositories=(spec,))
    reconciler = Reconciler(config)
    if start:
        reconciler.start()
    return Tenant(app, admin, consumer, namespace, remote, clone, reconciler, config)


def quick_config(stack: StackInfo, tmp_path: Path, **fields: Any) -> Config:
    """A reconciler config for a test: the stack's Control Plane as admin, a free loopback port,
    one-second polls and a short batch window; ``fields`` add or override."""
    return Config(
        **{
            "control_plane_kubeconfig": Path(stack.clusters["control-plane"].kubeconfig),
            "listen": f"127.0.0.1:{free_port()}",
            "poll_interval": 1.0,
            "batch_window": 0.3,
            "workers": 2,
            "work_dir": tmp_path / "work",
            **fields,
        }
    )


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def ready_status(generation: int = 1) -> dict:
    return {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "lastTransitionTime": "2026-11-21T10:00:00Z",
            }
        ],
        "observedGeneration": generation,
        "host": "db.example",
    }


def report_ready(tenant: Tenant, name: str) -> None:
    """What a provider does: write Ready into the Control Plane copy's status."""
    tenant.control_plane.apply(
        POSTGRES,
        {
            "apiVersion": "anynines.com/v1",
            "kind": "PostgresqlInstance",
            "metadata": {"name": name, "namespace": tenant.mapped},
            "status": ready_status(),
        },
        field_manager="provider",
        force=True,
        subresource="status",
    )
