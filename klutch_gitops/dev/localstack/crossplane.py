"""Crossplane core for the Control Plane Cluster, run out of cluster like every other process.

``crossplane core start`` normally runs in a pod after ``crossplane core init`` has installed its
CRDs, webhook configurations and TLS Secrets. Out of cluster the stack does that part itself: it
applies the CRDs that ``make bins`` copied next to the binary, turns the webhooks off (init would
point them at a Service in ``crossplane-system``, which has no endpoints here) and hands over a
client certificate directory, which core start loads before anything else even when no
composition function ever runs.

Configuration goes on the command line rather than in the environment: the command line then names
the state directory, so ``dev down`` and the tests can tell this stack's Crossplane from another's.
Only ``KUBECONFIG`` has no flag (controller-runtime reads it from the environment).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.dev.localstack import binaries, kubeconfig
from klutch_gitops.dev.localstack.launcher import Launcher
from klutch_gitops.dev.localstack.pki import KeyPair, Pki
from klutch_gitops.dev.localstack.processes import Process, free_port
from klutch_gitops.errors import KlutchError

# The Crossplane lines the stack runs, by KLUTCH_CROSSPLANE_VERSION: the binary and CRD directory
# `make bins` builds for each (binaries.py).
VERSIONS = {"2": ("crossplane", "crossplane-crds"), "1.20": ("crossplane-v1", "crossplane-v1-crds")}
DEFAULT_VERSION = "1.20"
VERSION_VARIABLE = "KLUTCH_CROSSPLANE_VERSION"


def selected_version() -> str:
    """The Crossplane line this process's stacks run, or an error naming the choices."""
    version = os.environ.get(VERSION_VARIABLE) or DEFAULT_VERSION
    if version not in VERSIONS:
        raise KlutchError(
            f"{VERSION_VARIABLE}={version!r} is not a Crossplane line the local stack runs",
            f"set it to one of {', '.join(sorted(VERSIONS))}, or unset it for {DEFAULT_VERSION}",
        )
    return version


def programs() -> dict[str, Path]:
    """The selected line's binary and CRDs, as ``crossplane`` and ``crossplane-crds``."""
    binary, crds = VERSIONS[selected_version()]
    found = binaries.require(binary, crds)
    return {"crossplane": found[binary], "crossplane-crds": found[crds]}


# libyaml's safe loader parses the 1.3 MB of CRDs in 0.1 s, PyYAML's in 1.5 s of stack start-up.
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class CrossplanePaths:
    """Where Crossplane's files live in the state directory."""

    root: Path

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def tls(self) -> Path:
        return self.root / "tls"

    @property
    def cache(self) -> Path:
        return self.root / "cache"


def load_crds(directory: Path) -> list[dict[str, Any]]:
    """Crossplane's CRDs (one per file), sorted by file name."""
    files = sorted(directory.glob("*.yaml"))
    return [yaml.load(path.read_text(), Loader=_Loader) for path in files]  # noqa: S506 (safe)


def write_client_tls(paths: CrossplanePaths, ca_pem: bytes, client: KeyPair) -> Path:
    """The ``TLS_CLIENT_CERTS_DIR`` layout core start insists on: ca.crt, tls.crt, tls.key."""
    paths.tls.mkdir(parents=True, mode=0o700)
    for name, data, mode in (
        ("ca.crt", ca_pem, 0o644),
        ("tls.crt", client.cert_pem, 0o644),
        ("tls.key", client.key_pem, 0o600),
    ):
        path = paths.tls / name
        path.touch(mode=mode)
        path.write_bytes(data)
    return paths.tls


def command(
    binary: Path, paths: CrossplanePaths, metrics_port: int, health_port: int
) -> tuple[list[str], dict[str, str]]:
    """The argv and environment of ``crossplane core start`` for this stack.

    Webhooks are off (see the module docstring); leader election is off because there is one
    replica. The metrics and health servers bind every interface: core start takes a port only.
    """
    argv = [
        str(binary),
        "core",
        "start",
        "--enable-webhooks=false",
        "--leader-election=false",
        f"--tls-client-certs-dir={paths.tls}",
        f"--cache-dir={paths.cache}",
        f"--metrics-port={metrics_port}",
        f"--health-probe-port={health_port}",
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(paths.root),  # nothing of the user's (registry credentials) leaks in
        "KUBECONFIG": str(paths.kubeconfig),
    }
    return argv, env


def prepare(
    bins: dict[str, Path], pki: Pki, paths: CrossplanePaths, control_plane_url: str
) -> None:
    """Crossplane's files, and its CRDs installed on the Control Plane before it starts, with
    the policy that keeps tenants' claims to their own composites (which exempts it).

    Its identity is a certificate of its own (CN ``crossplane``) in ``system:masters``: core
    composes resources of any kind, which in a real install the RBAC manager grants it one
    XRD and provider at a time.
    """
    # imported here: the kubernetes client costs every `klutch-gitops` command 0.16 s to load
    from kubernetes.config import new_client_from_config

    from klutch_gitops.kube.crds import install_crds
    from klutch_gitops.policies import install_policies, load_policies

    paths.cache.mkdir(parents=True, mode=0o700)
    identity = pki.client_cert("crossplane", ("system:masters",))
    kubeconfig.write(
        paths.kubeconfig,
        kubeconfig.render(
            "crossplane",
            control_plane_url,
            pki.serving_ca.read_bytes(),
            identity.cert_pem,
            identity.key_pem,
            namespace="crossplane-system",
        ),
    )
    function_client = pki.client_cert("crossplane")  # mTLS to function servers, if ever
    write_client_tls(paths, pki.serving_ca.read_bytes(), function_client)
    api = new_client_from_config(config_file=str(paths.kubeconfig))
    try:
        install_crds(api, load_crds(bins["crossplane-crds"]))
        install_policies(api, load_policies())
    finally:
        api.close()


def spawn(launcher: Launcher, binary: Path, paths: CrossplanePaths) -> tuple[Process, int, int]:
    """``crossplane core start``, not awaited; the process, its metrics and health ports."""
    metrics_port, health_port = free_port(), free_port()
    argv, env = command(binary, paths, metrics_port, health_port)
    return launcher.spawn("crossplane", argv, env), metrics_port, health_port
