"""The real Argo CD next to the reconciler: application-controller and repo-server v3.3.7 (one
binary, built by ``make bins`` from the Go module proxy) run out of cluster against the App Cluster
as its admin, with a Redis of their own from Debian's ``redis-server``.

How they are run, from github.com/argoproj/argo-cd/v3@v3.3.7:

- cmd/main.go: the binary becomes a component by ``ARGOCD_BINARY_NAME``.
- cmd/argocd-application-controller/commands/argocd_application_controller.go: the kubeconfig and
  ``--namespace`` come from cli.AddKubectlFlagsToCmd; ``--repo-server`` with
  ``--repo-server-plaintext`` (the repo-server runs ``--disable-tls``), ``--redis``
  (util/cache/cache.go AddCacheFlagsToCmd), ``--metrics-port``, ``--app-resync``, and
  ``--persist-resource-health`` so that ``status.resources[].health`` holds each resource's health
  (off by default in v3: the UI reads it from Redis).
- cmd/argocd-repo-server/commands/argocd_repo_server.go: ``--port``, ``--metrics-port``,
  ``--disable-tls``, ``--redis``; ``ARGOCD_GPG_ENABLED=false`` (util/gpg/gpg.go: otherwise it sets
  up a GnuPG home under /app), ``ARGOCD_ASK_PASS_SOCK`` (util/askpass/common.go, default
  /tmp/reposerver-ask-pass.sock, which two sessions would share).
- The Git server's CA: the repo-server reads a repository host's CA from the file named after the
  host under ``ARGOCD_TLS_DATA_PATH`` (util/cert/cert.go GetCertificateForConnect, used by both
  go-git's ls-remote and the git CLI's GIT_SSL_CAINFO in util/git/client.go). In cluster that
  directory is the ``argocd-tls-certs-cm`` ConfigMap mounted at /app/config/tls; here the harness
  writes that ConfigMap and the same file, so the repository is verified, not ``insecure``.
- The App Cluster is a cluster Secret (util/db/cluster.go secretToCluster: ``server``, ``name``,
  ``config`` JSON with ``tlsClientConfig`` caData/certData/keyData) with the stack's admin
  certificate: out of cluster, ``https://kubernetes.default.svc`` reaches nothing.
- No API server runs, so the ``default`` AppProject it would create is created here.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.launcher import Launcher, status_ok
from klutch_gitops.dev.localstack.processes import Process, free_port, port_open
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.crds import install_crds
from klutch_gitops.kube.resources import NAMESPACES
from tests.gitserver import GitServer

VERSION = "v3.3.7"  # tools/bins/argo-cd/go.mod
NAMESPACE = "argocd"
APPLICATIONS = Resource("argoproj.io", "v1alpha1", "applications", "Application")
PROJECTS = Resource("argoproj.io", "v1alpha1", "appprojects", "AppProject")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
MANAGER = "argocd-peer-test"  # the field manager of the objects the harness gives Argo CD
HEALTH_CM = Path(__file__).parents[2] / "catalog" / "health" / "argocd" / "argocd-cm.yaml"
TRACKING_KEY = "application.resourceTrackingMethod"
CONFLICT = re.compile(r"\b409\b|[Cc]onflict")


@dataclass
class ArgoPeer:
    """The running controllers and what a test asks of them."""

    app: Kube
    git_server: GitServer
    cluster_url: str  # the App Cluster as Argo CD's destination
    processes: list[Process] = field(default_factory=list)

    def serve(self, bare_repo: Path) -> str:
        """The https URL of ``bare_repo`` on the test Git server, through a symlink under its
        root (http-backend follows it), registered as a repository Secret: the reconciler's
        ``file://`` remote and Argo CD read the same repository. The Secret holds no CA (a
        repository Secret has no field for one): argocd-tls-certs-cm does."""
        bare_repo = bare_repo.resolve()
        digest = hashlib.sha256(str(bare_repo).encode()).hexdigest()[:10]
        link = self.git_server.root.resolve() / "argocd" / f"{bare_repo.stem}-{digest}.git"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(bare_repo, target_is_directory=True)
        url = self.git_server.url_of(link)
        labels = {"argocd.argoproj.io/secret-type": "repository"}
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"repo-{digest}", "namespace": NAMESPACE, "labels": labels},
            "stringData": {"type": "git", "url": url},
        }
        self.app.apply(SECRETS, secret, field_manager=MANAGER, force=True)
        return url

    def tracking(self, method: str) -> None:
        """Set argocd-cm's tracking method; the controller's settings informer reads it live."""
        patch = {"data": {TRACKING_KEY: method}}
        self.app.patch(CONFIGMAPS, NAMESPACE, "argocd-cm", patch)

    def application(
        self,
        name: str,
        repo_url: str,
        path: str,
        namespace: str,
        *,
        tracking: str = "annotation",
        prune: bool = True,
        auto_sync: bool = True,
        self_heal: bool = False,
        allow_empty: bool = False,
    ) -> dict:
        """An Application syncing ``path`` of ``repo_url``'s main into ``namespace``, as
        examples/argocd/application.yaml writes it (server-side apply, ``.klutch`` excluded),
        after switching argocd-cm to ``tracking`` (``annotation`` or ``label``).
        ``allow_empty``: automated sync prunes the last resource too (otherwise it refuses:
        "auto-sync will wipe out all resources", controller/appcontroller.go autoSync)."""
        self.tracking(tracking)
        spec: dict[str, Any] = {
            "project": "default",
            "source": {
                "repoURL": repo_url,
                "targetRevision": "main",
                "path": path,
                "directory": {"recurse": True, "exclude": ".klutch/*"},
            },
            "destination": {"server": self.cluster_url, "namespace": namespace},
            "syncPolicy": {"syncOptions": ["ServerSideApply=true"]},
        }
        if auto_sync:
            spec["syncPolicy"]["automated"] = {
                "prune": prune,
                "selfHeal": self_heal,
                "allowEmpty": allow_empty,
            }
        body = {
            "apiVersion": APPLICATIONS.api_version,
            "kind": "Application",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": spec,
        }
        return self.app.apply(APPLICATIONS, body, field_manager=MANAGER, force=True)

    def await_schema(self, group: str, version: str, kind: str, timeout: float = 60) -> float:
        """Wait until the App Cluster's OpenAPI v2 document describes ``kind``; the seconds
        waited. Argo CD diffs a server-side applied object against the schema its cluster cache
        loaded from there (gitops-engine pkg/utils/kube/ctl.go LoadOpenAPISchema), on its first
        sync of the cluster and on CRD events only (pkg/cache/cluster.go). The apiserver
        publishes a new CRD's schema a second or two after the CRD is established: an app
        first synced in between stays Unknown (ComparisonError "unable to resolve
        parseableType for GroupVersionKind"), with or without ServerSideDiff=true."""
        wanted = {"group": group, "version": version, "kind": kind}
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            definitions = self.app._call("GET", "/openapi/v2").get("definitions") or {}
            if any(
                wanted in (model.get("x-kubernetes-group-version-kind") or [])
                for model in definitions.values()
            ):
                return time.monotonic() - started
            time.sleep(0.5)
        raise AssertionError(f"the App Cluster's /openapi/v2 never described {wanted}")

    def app_object(self, name: str) -> dict:
        found = self.app.get(APPLICATIONS, NAMESPACE, name)
        if found is None:
            raise AssertionError(f"no Application {name!r} in {NAMESPACE}")
        return found

    def health(self, name: str, resource: str | None = None) -> tuple[str, str]:
        """(status, message) of the Application's health, or of its resource named
        ``resource`` (from ``status.resources``); ("", "") while Argo CD has not assessed it."""
        status = self.app_object(name).get("status") or {}
        if resource is None:
            health = status.get("health") or {}
            return health.get("status", ""), health.get("message", "")
        for entry in status.get("resources") or []:
            if entry.get("name") == resource:
                health = entry.get("health") or {}
                return health.get("status", ""), health.get("message", "")
        return "", ""

    def sync_status(self, name: str) -> str:
        """Synced, OutOfSync or Unknown (empty before the first comparison)."""
        return ((self.app_object(name).get("status") or {}).get("sync") or {}).get("status", "")

    def refresh(self, name: str) -> None:
        """Ask for a hard refresh, as a Git webhook or ``argocd app get --hard-refresh`` does
        (annotation argocd.argoproj.io/refresh, controller/appcontroller.go): Git is read again
        now instead of at the next ``--app-resync``."""
        patch = {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "hard"}}}
        self.app.patch(APPLICATIONS, NAMESPACE, name, patch)

    def delete_app(self, name: str) -> None:
        """Delete the Application alone: without Argo CD's resources finalizer nothing it
        synced is deleted with it."""
        self.app.delete(APPLICATIONS, NAMESPACE, name)

    def log(self, component: str) -> str:
        for process in self.processes:
            if process.name == component:
                return process.log.read_text(errors="replace")
        raise KeyError(f"no Argo CD process {component!r}")

    def conflicts(self) -> list[str]:
        """Log lines of the application-controller that speak of a 409 or a conflict."""
        lines = self.log("argocd-application-controller").splitlines()
        return [line for line in lines if CONFLICT.search(line)]

    def tails(self, lines: int = 40) -> str:
        """The processes' last log lines, for a failure message."""
        return "\n".join(f"--- {p.name} ({p.log})\n{p.log_tail(lines)}" for p in self.processes)


def argocd_crds() -> list[dict[str, Any]]:
    """Application, ApplicationSet and AppProject from the module's manifests/crds (its
    kustomization.yaml is skipped by kind)."""
    directory = binaries.require("argocd-crds")["argocd-crds"]
    docs = [
        doc
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]
    return [doc for doc in docs if doc.get("kind") == "CustomResourceDefinition"]


def health_customizations() -> dict[str, str]:
    """Our Lua health checks as argocd-cm keys, read from catalog/health/argocd/argocd-cm.yaml."""
    data = yaml.safe_load(HEALTH_CM.read_text())["data"]
    prefix = "resource.customizations.health."
    bad = [key for key in data if not key.startswith(prefix)]
    if bad:
        raise ValueError(f"{HEALTH_CM}: keys {bad} are not {prefix}<group>_<Kind>")
    return data


def cluster_secret(kubeconfig: str) -> tuple[str, dict]:
    """The App Cluster as Argo CD's cluster Secret, from the stack's admin kubeconfig."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    tls = {
        "insecure": False,
        "caData": cluster["certificate-authority-data"],  # JSON []byte: base64, as here
        "certData": user["client-certificate-data"],
        "keyData": user["client-key-data"],
    }
    server = cluster["server"]
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "app-cluster",
            "namespace": NAMESPACE,
            "labels": {"argocd.argoproj.io/secret-type": "cluster"},
        },
        "stringData": {
            "name": "app-cluster",
            "server": server,
            "config": json.dumps({"tlsClientConfig": tls}),
        },
    }
    return server, secret


def _objects(git_server: GitServer, kubeconfig: str) -> tuple[str, list[tuple[Resource, dict]]]:
    """The namespace's settings: argocd-cm with our health checks, argocd-rbac-cm,
    argocd-secret, argocd-tls-certs-cm (the Git server's CA under its host name), the cluster
    Secret, the default AppProject; and the App Cluster's URL."""
    server, cluster = cluster_secret(kubeconfig)
    labels = {"app.kubernetes.io/part-of": "argocd"}

    def configmap(name: str, data: dict[str, str]) -> dict:
        meta = {"name": name, "namespace": NAMESPACE, "labels": labels}
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}

    host = git_server.base_url.removeprefix("https://").split(":")[0]
    argocd_secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "argocd-secret", "namespace": NAMESPACE, "labels": labels},
        "stringData": {"server.secretkey": secrets.token_urlsafe(32)},
    }
    project = {
        "apiVersion": PROJECTS.api_version,
        "kind": "AppProject",
        "metadata": {"name": "default", "namespace": NAMESPACE},
        "spec": {
            "sourceRepos": ["*"],
            "destinations": [{"server": "*", "namespace": "*"}],
            "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
        },
    }
    cm = {**health_customizations(), TRACKING_KEY: "annotation"}
    return server, [
        (CONFIGMAPS, configmap("argocd-cm", cm)),
        (CONFIGMAPS, configmap("argocd-rbac-cm", {})),
        (CONFIGMAPS, configmap("argocd-tls-certs-cm", {host: git_server.ca_file.read_text()})),
        (SECRETS, argocd_secret),
        (SECRETS, cluster),
        (PROJECTS, project),
    ]


def start_argocd(
    api: client.ApiClient, kubeconfig: str, git_server: GitServer, workdir: Path
) -> ArgoPeer:
    """Install Argo CD's CRDs and settings on the App Cluster and start Redis, the repo-server
    and the application-controller, awaited until they answer; ``stop_argocd`` stops them."""
    binary = binaries.require("argocd")["argocd"]
    install_crds(api, argocd_crds(), field_manager=MANAGER, timeout=120)
    app = Kube(api)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    app.apply(NAMESPACES, namespace, field_manager=MANAGER)
    server, objects = _objects(git_server, kubeconfig)
    for resource, body in objects:
        app.apply(resource, body, field_manager=MANAGER, force=True)
    tls = workdir / "tls"  # what the argocd-tls-certs-cm mount holds in cluster
    tls.mkdir(parents=True, exist_ok=True)
    for name, pem in objects[2][1]["data"].items():
        (tls / name).write_text(pem)

    launcher = Launcher(workdir / "logs", workdir / "pids", lambda _: None)
    peer = ArgoPeer(app, git_server, server, launcher.processes)
    redis, repo, metrics = free_port(), free_port(), {"repo": free_port(), "ctl": free_port()}
    try:
        redis_process = launcher.spawn("redis", _redis_argv(redis, workdir))
        launcher.await_ready(redis_process, "its port", lambda: port_open(redis))
        env = _env(workdir, tls, kubeconfig)
        common = ["--redis", f"127.0.0.1:{redis}", "--loglevel", "info", "--logformat", "text"]
        repo_server = launcher.spawn(
            "argocd-repo-server",
            [str(binary), "--address", "127.0.0.1", "--port", str(repo), "--disable-tls",
             "--metrics-address", "127.0.0.1", "--metrics-port", str(metrics["repo"]), *common],
            {**env, "ARGOCD_BINARY_NAME": "argocd-repo-server"},
        )  # fmt: skip
        url = f"http://127.0.0.1:{metrics['repo']}/healthz?full=true"
        launcher.await_ready(repo_server, "/healthz", lambda: status_ok(url, None))
        controller = launcher.spawn(
            "argocd-application-controller",
            [str(binary), "--namespace", NAMESPACE, "--kubeconfig", kubeconfig,
             "--repo-server", f"127.0.0.1:{repo}", "--repo-server-plaintext",
             "--metrics-port", str(metrics["ctl"]), "--app-resync", "30",
             "--persist-resource-health", *common],
            {**env, "ARGOCD_BINARY_NAME": "argocd-application-controller"},
        )  # fmt: skip
        url = f"http://127.0.0.1:{metrics['ctl']}/metrics"
        launcher.await_ready(controller, "/metrics", lambda: status_ok(url, None))
    except BaseException:
        stop_argocd(peer)
        raise
    return peer


def _redis_argv(port: int, workdir: Path) -> list[str]:
    """A Redis for this session only: loopback, no persistence."""
    return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", str(workdir)]  # fmt: skip


def _env(workdir: Path, tls: Path, kubeconfig: str) -> dict[str, str]:
    """The environment both components share: no GnuPG, a socket and temp dir of their own,
    the Git server's CA where the repo-server looks for it (not git's GIT_SSL_CAINFO, which the
    test process sets for the reconciler)."""
    tmp = workdir / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "GIT_SSL_CAINFO"}
    return {
        **env,
        "KUBECONFIG": kubeconfig,
        "ARGOCD_GPG_ENABLED": "false",
        "ARGOCD_ASK_PASS_SOCK": str(workdir / "askpass.sock"),
        "ARGOCD_TLS_DATA_PATH": str(tls),
        "TMPDIR": str(tmp),
    }


def stop_argocd(peer: ArgoPeer) -> None:
    for process in reversed(peer.processes):
        process.stop()
