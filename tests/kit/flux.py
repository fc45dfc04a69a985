"""The real Flux next to the reconciler: source-controller and kustomize-controller v1.9.6 (built
by ``make bins`` from the Go module proxy) run out of cluster against an App Cluster as its admin.
The peers tests (tests/peers/) and the benchmark's cold-sync baseline (bench/flux.py) share it.

How they are run, from their sources (github.com/fluxcd/{source,kustomize}-controller@v1.9.6):

- main.go of both: ``--metrics-addr``, ``--health-addr`` (controller-runtime's /readyz and
  /healthz, pkg/runtime/probes/probes.go), ``--enable-leader-election``
  (pkg/runtime/leaderelection/leaderelection.go), ``--watch-all-namespaces``
  (pkg/runtime/controller/watch.go); the kubeconfig comes from ``KUBECONFIG``
  (controller-runtime's config loader).
- source-controller keeps artifacts under ``--storage-path`` and serves them at
  ``--storage-addr``; ``--storage-adv-addr`` is the host:port it writes into
  ``GitRepository.status.artifact.url`` (pkg/artifact/config/flags.go and options.go), which is
  where kustomize-controller downloads the tarball from. Out of cluster both are one loopback port.
- A GitRepository over HTTPS trusts a private CA from its ``spec.secretRef`` Secret's ``ca.crt``
  key (docs/spec/v1/gitrepositories.md, "HTTPS Certificate Authority"; pkg/runtime/secrets
  KeyCACert). source-controller reads no ``file://`` URL, so repositories are served by an HTTPS
  Git server (tests/gitserver.py), anything with the ``Forge`` shape below.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import yaml
from kubernetes import client

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.launcher import Launcher, status_ok
from klutch_gitops.dev.localstack.processes import Process, free_port
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.crds import install_crds
from klutch_gitops.kube.resources import NAMESPACES, SECRETS

VERSION = "v1.9.6"  # tools/bins/{source,kustomize}-controller/go.mod, the Flux 2.9 line
GIT_REPOSITORIES = Resource("source.toolkit.fluxcd.io", "v1", "gitrepositories", "GitRepository")
KUSTOMIZATIONS = Resource("kustomize.toolkit.fluxcd.io", "v1", "kustomizations", "Kustomization")
MANAGER = "flux-peer-test"  # the field manager of the objects the tests give Flux
CA_SECRET = "klutch-test-forge-ca"  # a Secret's name, not a password
# The reconciler's report and status files are not manifests (examples/flux/README.md step 2).
IGNORE = ".klutch/\n"
CONFLICT = re.compile(r"\b409\b|conflict", re.IGNORECASE)


class Forge(Protocol):
    """What Flux needs of a Git server: where its repositories live, their https URLs, its CA."""

    @property
    def root(self) -> Path: ...

    @property
    def ca_file(self) -> Path: ...

    def url_of(self, bare: Path) -> str: ...


@dataclass
class FluxPeer:
    """The running controllers and what a test asks of them."""

    app: Kube
    git_server: Forge
    processes: list[Process] = field(default_factory=list)

    def serve(self, bare_repo: Path) -> str:
        """The https URL of ``bare_repo`` on the test Git server: a repository under the
        server's root as it is, any other one through a symlink there (http-backend follows it),
        so the reconciler's ``file://`` remote and Flux read the same repository."""
        bare_repo = bare_repo.resolve()
        root = self.git_server.root.resolve()
        if bare_repo.is_relative_to(root):
            return self.git_server.url_of(bare_repo)
        digest = hashlib.sha256(str(bare_repo).encode()).hexdigest()[:10]
        link = root / "flux" / f"{bare_repo.stem}-{digest}.git"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(bare_repo, target_is_directory=True)
        return self.git_server.url_of(link)

    def sync(
        self,
        name: str,
        url: str,
        path: str,
        *,
        namespace: str = "flux-system",
        interval: str = "2s",
        prune: bool = True,
        wait: bool = False,
        health_check_exprs: list[dict] | None = None,
        target_namespace: str | None = None,
    ) -> None:
        """Create or update the GitRepository ``name`` (branch main of ``url``, trusting the test
        server's CA, without ``.klutch/``) and the Kustomization ``name`` that applies ``path``."""
        self.source(name, url, namespace=namespace, interval=interval)
        self.kustomize(
            name,
            path,
            namespace=namespace,
            interval=interval,
            prune=prune,
            wait=wait,
            health_check_exprs=health_check_exprs,
            target_namespace=target_namespace,
        )

    def source(
        self, name: str, url: str, *, namespace: str = "flux-system", interval: str = "2s"
    ) -> None:
        """Create or update the GitRepository ``name``: branch main of ``url``, trusting the Git
        server's CA, without ``.klutch/``; its namespace and CA Secret first."""
        self._namespace(namespace)
        self.app.apply(SECRETS, self._ca_secret(namespace), field_manager=MANAGER, force=True)
        source = {
            "apiVersion": GIT_REPOSITORIES.api_version,
            "kind": "GitRepository",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "interval": interval,
                "url": url,
                "ref": {"branch": "main"},
                "secretRef": {"name": CA_SECRET},
                "ignore": IGNORE,
                "timeout": "20s",
            },
        }
        self.app.apply(GIT_REPOSITORIES, source, field_manager=MANAGER, force=True)

    def kustomize(
        self,
        name: str,
        path: str,
        *,
        namespace: str = "flux-system",
        interval: str = "2s",
        prune: bool = True,
        wait: bool = False,
        health_check_exprs: list[dict] | None = None,
        target_namespace: str | None = None,
        timeout: str = "60s",
    ) -> None:
        """Create or update the Kustomization ``name`` that applies ``path`` of the
        GitRepository of the same name; ``timeout`` bounds one apply (and health checks)."""
        spec: dict[str, Any] = {
            "interval": interval,
            "retryInterval": interval,
            "timeout": timeout,
            "sourceRef": {"kind": "GitRepository", "name": name},
            "path": path,
            "prune": prune,
            "wait": wait,
        }
        if health_check_exprs is not None:
            spec["healthCheckExprs"] = health_check_exprs
        if target_namespace is not None:
            spec["targetNamespace"] = target_namespace
        kustomization = {
            "apiVersion": KUSTOMIZATIONS.api_version,
            "kind": "Kustomization",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        self.app.apply(KUSTOMIZATIONS, kustomization, field_manager=MANAGER, force=True)

    def kustomization(self, name: str, namespace: str = "flux-system") -> dict:
        """The live Kustomization; an error when there is none."""
        live = self.app.get(KUSTOMIZATIONS, namespace, name)
        if live is None:
            raise LookupError(f"no Kustomization {namespace}/{name} on the App Cluster")
        return live

    def ready(self, name: str, namespace: str = "flux-system") -> tuple[str, str, str]:
        """The Kustomization's Ready condition: (status, reason, message); ("Unknown", "", "")
        before kustomize-controller wrote one. Every reconciliation (each ``interval``) marks it
        Unknown/Progressing while it runs (kustomization_controller.go ``reconcile``), so wait
        for a verdict with ``eventually`` instead of reading it once."""
        return condition(self.kustomization(name, namespace), "Ready")

    def source_ready(self, name: str, namespace: str = "flux-system") -> tuple[str, str, str]:
        """The GitRepository's Ready condition, like ``ready``."""
        live = self.app.get(GIT_REPOSITORIES, namespace, name)
        if live is None:
            raise LookupError(f"no GitRepository {namespace}/{name} on the App Cluster")
        return condition(live, "Ready")

    def reconcile(self, name: str, namespace: str = "flux-system") -> None:
        """Ask both controllers for a reconciliation now, as ``flux reconcile --with-source``
        does: the ``reconcile.fluxcd.io/requestedAt`` annotation (fluxcd/pkg apis/meta
        ReconcileRequestAnnotation)."""
        stamp = {"metadata": {"annotations": {"reconcile.fluxcd.io/requestedAt": _now()}}}
        self.app.patch(GIT_REPOSITORIES, namespace, name, stamp)
        self.app.patch(KUSTOMIZATIONS, namespace, name, stamp)

    def suspend(self, name: str, namespace: str = "flux-system") -> None:
        """Suspend the Kustomization: kustomize-controller applies and prunes nothing more."""
        self.app.patch(KUSTOMIZATIONS, namespace, name, {"spec": {"suspend": True}})

    def delete(self, name: str, namespace: str = "flux-system") -> None:
        """Delete the Kustomization and its GitRepository. With ``prune: true`` kustomize-
        controller's finalizer deletes what it applied first (its garbage collection)."""
        self.app.delete(KUSTOMIZATIONS, namespace, name)
        self.app.delete(GIT_REPOSITORIES, namespace, name)

    def log(self, controller: str) -> str:
        """The whole log of ``source-controller`` or ``kustomize-controller``."""
        for process in self.processes:
            if process.name == controller:
                return process.log.read_text(errors="replace")
        raise KeyError(f"no Flux process {controller!r}")

    def conflicts(self) -> list[str]:
        """Log lines of either controller whose error (or, above info, message) speaks of a 409
        or a conflict. The apiserver's advice on finalizer names ("…accidental conflicts with
        other finalizer writers"), which controller-runtime logs at info, is no conflict."""
        found = []
        for process in self.processes:
            for line in self.log(process.name).splitlines():
                try:
                    entry = json.loads(line)
                except ValueError:
                    entry = {"level": "error", "msg": line}  # not controller-runtime's: keep it
                said = str(entry.get("error", ""))
                if entry.get("level") != "info":
                    said += f" {entry.get('msg', '')}"
                if CONFLICT.search(said):
                    found.append(line)
        return found

    def tails(self, lines: int = 40) -> str:
        """The controllers' last log lines, for a failure message."""
        return "\n".join(f"--- {p.name} ({p.log})\n{p.log_tail(lines)}" for p in self.processes)

    def _namespace(self, namespace: str) -> None:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        self.app.apply(NAMESPACES, body, field_manager=MANAGER)

    def _ca_secret(self, namespace: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": CA_SECRET, "namespace": namespace},
            "stringData": {"ca.crt": self.git_server.ca_file.read_text()},
        }


def condition(obj: dict, kind: str) -> tuple[str, str, str]:
    for entry in (obj.get("status") or {}).get("conditions") or []:
        if entry.get("type") == kind:
            return entry.get("status", ""), entry.get("reason", ""), entry.get("message", "")
    return "Unknown", "", ""


def _now() -> str:
    return str(time.time_ns())  # any new value asks again; Flux compares, never parses it


def flux_crds() -> list[dict[str, Any]]:
    """Every CRD both controllers serve (their modules' config/crd/bases)."""
    found = binaries.require("source-controller-crds", "kustomize-controller-crds")
    return [
        doc
        for directory in found.values()
        for path in sorted(directory.glob("*.yaml"))
        for doc in yaml.safe_load_all(path.read_text())
        if doc
    ]


def start_flux(
    api: client.ApiClient, kubeconfig: str, git_server: Forge, workdir: Path
) -> FluxPeer:
    """Install Flux's CRDs on the App Cluster and start both controllers, awaited until their
    readiness endpoints answer; the caller stops ``peer.processes`` (``stop_flux``)."""
    bins = binaries.require("source-controller", "kustomize-controller")
    install_crds(api, flux_crds(), field_manager=MANAGER, timeout=120)
    launcher = Launcher(workdir / "logs", workdir / "pids", lambda _: None)
    peer = FluxPeer(Kube(api), git_server, launcher.processes)
    env = {**os.environ, "KUBECONFIG": kubeconfig, "RUNTIME_NAMESPACE": "flux-system"}
    storage = free_port()
    (workdir / "artifacts").mkdir(exist_ok=True)  # source-controller refuses a missing one
    common = ["--enable-leader-election=false", "--watch-all-namespaces=true"]
    health: dict[str, int] = {}
    for name, extra in (
        (
            "source-controller",
            [
                f"--storage-path={workdir / 'artifacts'}",
                f"--storage-addr=127.0.0.1:{storage}",
                f"--storage-adv-addr=127.0.0.1:{storage}",
            ],
        ),
        ("kustomize-controller", []),
    ):
        health[name] = free_port()
        argv = [
            str(bins[name]),
            f"--metrics-addr=127.0.0.1:{free_port()}",
            f"--health-addr=127.0.0.1:{health[name]}",
            *common,
            *extra,
        ]
        launcher.spawn(name, argv, env)
    try:
        for process in launcher.processes:
            url = f"http://127.0.0.1:{health[process.name]}/readyz"
            launcher.await_ready(process, "/readyz", lambda u=url: status_ok(u, None))
    except BaseException:
        stop_flux(peer)
        raise
    return peer


def stop_flux(peer: FluxPeer) -> None:
    for process in reversed(peer.processes):
        process.stop()
