"""The two Kubernetes clusters: one etcd (a key prefix per cluster), a kube-apiserver and a
kube-controller-manager per cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from klutch_gitops.dev.localstack import kubeconfig
from klutch_gitops.dev.localstack.launcher import Launcher, json_ok, status_ok, tls_context
from klutch_gitops.dev.localstack.pki import Pki
from klutch_gitops.dev.localstack.processes import Process, free_port

KCM_CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
)


@dataclass
class ClusterInfo:
    url: str
    kubeconfig: str


@dataclass(frozen=True)
class Etcd:
    url: str
    ports: tuple[int, int]  # client, peer


def start_etcd(launcher: Launcher, binary: Path, data_dir: Path) -> Etcd:
    """etcd on loopback without fsync (its data is thrown away), awaited until healthy."""
    port, peer = free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    process = launcher.spawn(
        "etcd",
        [
            str(binary),
            "--name=klutch-local",
            f"--data-dir={data_dir}",
            f"--listen-client-urls={url}",
            f"--advertise-client-urls={url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=klutch-local=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    launcher.await_ready(
        process,
        "health",
        lambda: json_ok(f"{url}/health", None, lambda b: b.get("health") == "true"),
    )
    return Etcd(url, (port, peer))


def spawn_apiservers(
    launcher: Launcher,
    binary: Path,
    pki: Pki,
    etcd_url: str,
    certs: Path,
    clusters: tuple[str, ...],
) -> dict[str, tuple[Process, int]]:
    """A kube-apiserver per cluster, not awaited: they start while the rest does."""
    started = {}
    for cluster in clusters:
        port = free_port()
        argv = [
            str(binary),
            f"--etcd-servers={etcd_url}",
            f"--etcd-prefix=/klutch/{cluster}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={port}",
            f"--cert-dir={certs / cluster}",
            f"--tls-cert-file={pki.serving_cert}",
            f"--tls-private-key-file={pki.serving_key}",
            f"--client-ca-file={pki.client_ca}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--authorization-mode=RBAC",
            f"--service-account-issuer=https://127.0.0.1:{port}",
            f"--service-account-key-file={pki.sa_pub(cluster)}",
            f"--service-account-signing-key-file={pki.sa_key(cluster)}",
            "--v=0",
        ]
        started[cluster] = (launcher.spawn(f"kube-apiserver-{cluster}", argv), port)
    return started


def await_apiservers(
    launcher: Launcher,
    apiservers: dict[str, tuple[Process, int]],
    pki: Pki,
    kubeconfig_path: Callable[[str], Path],
) -> dict[str, ClusterInfo]:
    """Each kube-apiserver once ready, with the admin kubeconfig written for it."""
    tls = tls_context(pki, client=True)
    clusters: dict[str, ClusterInfo] = {}
    for cluster, (process, port) in apiservers.items():
        url = f"https://127.0.0.1:{port}"
        launcher.await_ready(process, "/readyz", partial(status_ok, f"{url}/readyz", tls))
        config = kubeconfig.render(
            cluster,
            url,
            pki.serving_ca.read_bytes(),
            pki.admin_cert.read_bytes(),
            pki.admin_key.read_bytes(),
        )
        clusters[cluster] = ClusterInfo(
            url, str(kubeconfig.write(kubeconfig_path(cluster), config))
        )
    return clusters


def start_controller_managers(
    launcher: Launcher, binary: Path, pki: Pki, clusters: dict[str, ClusterInfo], certs: Path
) -> dict[str, int]:
    """One kube-controller-manager per cluster, started together, then awaited."""
    kcm_ports = {cluster: free_port() for cluster in clusters}
    started: dict[str, Process] = {}
    for cluster, port in kcm_ports.items():
        kcm_kubeconfig = kubeconfig.write(
            certs / cluster / "controller-manager.kubeconfig",
            _controller_manager_kubeconfig(pki, clusters[cluster].url),
        )
        started[cluster] = launcher.spawn(
            f"kube-controller-manager-{cluster}",
            [
                str(binary),
                f"--kubeconfig={kcm_kubeconfig}",
                f"--authentication-kubeconfig={kcm_kubeconfig}",
                f"--authorization-kubeconfig={kcm_kubeconfig}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key(cluster)}",
                f"--root-ca-file={pki.serving_ca}",
                f"--controllers={','.join(KCM_CONTROLLERS)}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={port}",
                f"--tls-cert-file={pki.serving_cert}",
                f"--tls-private-key-file={pki.serving_key}",
                f"--cluster-name={cluster}",
                "--v=0",
            ],
        )
    tls = tls_context(pki)
    for cluster, port in kcm_ports.items():
        launcher.await_ready(
            started[cluster],
            "/healthz",
            partial(status_ok, f"https://127.0.0.1:{port}/healthz", tls),
        )
    return kcm_ports


def _controller_manager_kubeconfig(pki: Pki, url: str) -> dict[str, Any]:
    """The identity the bootstrap RBAC policy grants the controller manager, not system:masters."""
    cert = pki.client_cert("system:kube-controller-manager")
    return kubeconfig.render(
        "controller-manager",
        url,
        pki.serving_ca.read_bytes(),
        cert.cert_pem,
        cert.key_pem,
        namespace="kube-system",
    )
