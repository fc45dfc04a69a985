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

Compositions are function pipelines (Crossplane 2 has no Resources mode), and no function package
can be pulled here, so the stack serves the local backend's function itself
(klutch_local/function) on loopback and registers it the way Crossplane finds a function:
its function runner dials the ``status.endpoint`` of the Active FunctionRevision labelled
``pkg.crossplane.io/package: <function>`` (internal/xfn/function_runner.go ``getClientConn``,
1.20 and 2.4 alike). Core runs with ``--package-runtime=External``, so no Deployment is made for
it (internal/controller/pkg/pkg.go sets up the runtime controller only for ``Deployment``); the
Function and its revision carry ``crossplane.io/paused``, so the package manager and the revision
reconciler, which would fail to pull the package and report it unhealthy, leave them and the
endpoint alone (both return early for a paused object). The Function exists so the runner's
connection garbage collector, which closes connections to functions no Function names, keeps
the connection; the revision's ``status.capabilities`` says ``composition``, which 2.x checks
before it accepts a Composition revision (internal/xfn/capabilities.go).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.dev.localstack import binaries, kubeconfig
from klutch_gitops.dev.localstack.components import COMPONENTS
from klutch_gitops.dev.localstack.launcher import Launcher
from klutch_gitops.dev.localstack.pki import KeyPair, Pki
from klutch_gitops.dev.localstack.processes import Process, free_port
from klutch_gitops.errors import KlutchError

# The Crossplane lines the stack runs, by KLUTCH_CROSSPLANE_VERSION: the binary and CRD directory
# `make bins` builds for each (binaries.py).
VERSIONS = {"2": ("crossplane", "crossplane-crds"), "1.20": ("crossplane-v1", "crossplane-v1-crds")}
DEFAULT_VERSION = "2"
VERSION_VARIABLE = "KLUTCH_CROSSPLANE_VERSION"
FUNCTION_NAME = "function-klutch-local"
PACKAGE_LABEL = "pkg.crossplane.io/package"
PAUSED = "crossplane.io/paused"
PKG_GROUP, PKG_VERSION = "pkg.crossplane.io", "v1"


def selected_version() -> str:
    """The Crossplane line this process's stacks run, or an error naming the choices."""
    version = os.environ.get(VERSION_VARIABLE) or DEFAULT_VERSION
    if version not in VERSIONS:
        raise KlutchError(
            f"{VERSION_VARIABLE}={version!r} is not a Crossplane line the local stack runs",
            f"set it to one of {', '.join(sorted(VERSIONS))}, or unset it for {DEFAULT_VERSION}",
        )
    return version


def programs(version: str | None = None) -> dict[str, Path]:
    """The binary and CRDs of ``version`` (by default the selected line), as ``crossplane`` and
    ``crossplane-crds``."""
    binary, crds = VERSIONS[version or selected_version()]
    found = binaries.require(binary, crds)
    return {"crossplane": found[binary], "crossplane-crds": found[crds]}


def release(version: str | None = None) -> str:
    """The Crossplane release ``version``'s line builds (``v2.4.0``), from its wrapper go.mod."""
    binary, _ = VERSIONS[version or selected_version()]
    (component,) = (c for c in COMPONENTS if binary in c.binaries)
    return component.version()


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

    @property
    def function_tls(self) -> Path:
        """The function server's mTLS files: its serving pair and the CA of Crossplane's."""
        return self.root / "function-tls"


def load_crds(directory: Path) -> list[dict[str, Any]]:
    """Crossplane's CRDs (one per file), sorted by file name."""
    files = sorted(directory.glob("*.yaml"))
    return [yaml.load(path.read_text(), Loader=_Loader) for path in files]  # noqa: S506 (safe)


def write_tls(directory: Path, ca_pem: bytes, pair: KeyPair) -> Path:
    """The layout core start (``TLS_CLIENT_CERTS_DIR``) and the function SDK both read: ca.crt,
    tls.crt, tls.key."""
    directory.mkdir(parents=True, mode=0o700)
    for name, data, mode in (
        ("ca.crt", ca_pem, 0o644),
        ("tls.crt", pair.cert_pem, 0o644),
        ("tls.key", pair.key_pem, 0o600),
    ):
        path = directory / name
        path.touch(mode=mode)
        path.write_bytes(data)
    return directory


def write_client_tls(paths: CrossplanePaths, ca_pem: bytes, client: KeyPair) -> Path:
    """Crossplane's client certificate for function servers, and the CA it trusts them by."""
    return write_tls(paths.tls, ca_pem, client)


def function_objects(endpoint: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The paused Function and Active FunctionRevision that point Crossplane at ``endpoint``."""
    metadata = {"annotations": {PAUSED: "true"}, "labels": {PACKAGE_LABEL: FUNCTION_NAME}}
    image = f"local.klutch.invalid/{FUNCTION_NAME}:served-by-the-stack"
    function = {
        "apiVersion": f"{PKG_GROUP}/{PKG_VERSION}",
        "kind": "Function",
        "metadata": {"name": FUNCTION_NAME, "annotations": metadata["annotations"]},
        "spec": {"package": image},
    }
    revision = {
        "apiVersion": f"{PKG_GROUP}/{PKG_VERSION}",
        "kind": "FunctionRevision",
        "metadata": {"name": f"{FUNCTION_NAME}-local", **metadata},
        "spec": {"image": image, "revision": 1, "desiredState": "Active"},
        "status": {"endpoint": endpoint, "capabilities": ["composition"]},
    }
    return function, revision


def register_function(api: Any, endpoint: str) -> None:
    """Create the Function and its revision, then write the revision's endpoint into its
    status (the status subresource ignores it on create)."""
    from kubernetes import client

    custom = client.CustomObjectsApi(api)
    function, revision = function_objects(endpoint)
    custom.create_cluster_custom_object(PKG_GROUP, PKG_VERSION, "functions", function)
    custom.create_cluster_custom_object(PKG_GROUP, PKG_VERSION, "functionrevisions", revision)
    custom.patch_cluster_custom_object_status(
        PKG_GROUP,
        PKG_VERSION,
        "functionrevisions",
        revision["metadata"]["name"],
        {"status": revision["status"]},
    )


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
        "--package-runtime=External",
    ]
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(paths.root),  # nothing of the user's (registry credentials) leaks in
        "KUBECONFIG": str(paths.kubeconfig),
    }
    return argv, env


def prepare(bins: dict[str, Path], pki: Pki, paths: CrossplanePaths, control_plane_url: str) -> int:
    """Crossplane's files, and its CRDs installed on the Control Plane before it starts, with
    the policy that keeps tenants' claims to their own composites (which exempts it), and the
    local function registered; the port the function is to serve on.

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
    function_client = pki.client_cert("crossplane")  # mTLS to the function server
    write_client_tls(paths, pki.serving_ca.read_bytes(), function_client)
    serving = KeyPair(pki.serving_cert.read_bytes(), pki.serving_key.read_bytes())
    write_tls(paths.function_tls, pki.client_ca.read_bytes(), serving)
    function_port = free_port()
    api = new_client_from_config(config_file=str(paths.kubeconfig))
    try:
        install_crds(api, load_crds(bins["crossplane-crds"]))
        install_policies(api, load_policies())
        register_function(api, f"127.0.0.1:{function_port}")
    finally:
        api.close()
    return function_port


def spawn(launcher: Launcher, binary: Path, paths: CrossplanePaths) -> tuple[Process, int, int]:
    """``crossplane core start``, not awaited; the process, its metrics and health ports."""
    metrics_port, health_port = free_port(), free_port()
    argv, env = command(binary, paths, metrics_port, health_port)
    return launcher.spawn("crossplane", argv, env), metrics_port, health_port


def spawn_function(launcher: Launcher, paths: CrossplanePaths, port: int) -> Process:
    """function-klutch-local on ``port`` (loopback, mTLS), not awaited."""
    argv = [
        sys.executable,
        "-m",
        "klutch_local.function",
        f"--address=127.0.0.1:{port}",
        f"--tls-dir={paths.function_tls}",
    ]
    return launcher.spawn(FUNCTION_NAME, argv)
