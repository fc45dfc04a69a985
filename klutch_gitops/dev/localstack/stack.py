"""The local stack: etcd, two Kubernetes clusters, and Dex backed by OpenLDAP, on loopback.

``LocalStack.start`` makes the PKI, starts every process, waits until each is ready and writes what
a client needs (kubeconfigs, ``stack.json``, ``stack.env``) into the state directory. It runs in the
caller's process: the test harness owns it directly, ``dev up`` owns it through a daemon.

What each step starts is in its own module: ``clusters`` (etcd, the kube-apiservers and
controller managers), ``ldap`` and ``dex`` (the identity provider), ``crossplane``, ``backend``
(PostgreSQL and the local provider); ``launcher`` spawns and awaits them.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.dev.localstack import binaries, clusters, crossplane, dex, ldap, postgres
from klutch_gitops.dev.localstack.backend import start_local_backend
from klutch_gitops.dev.localstack.clusters import ClusterInfo
from klutch_gitops.dev.localstack.launcher import Launcher, json_ok, status_ok, tls_context
from klutch_gitops.dev.localstack.pki import Pki, write_pki
from klutch_gitops.dev.localstack.processes import Process, free_port, port_open
from klutch_gitops.errors import KlutchError

CLUSTERS = ("app", "control-plane")
# the ProviderConfig catalog/compositions/local names, and the ClusterProviderConfig
# catalog/namespaced composes with
LOCAL_PROVIDER_CONFIG = "local-postgresql"
DEV_USER = ldap.User(
    email="developer@klutch.example",
    username="developer",
    password="",
    groups=("klutch-developers", "team-a"),
)


@dataclass
class DexInfo:
    issuer: str
    ca: str
    username: str
    email: str
    password: str
    groups: list[str]
    automation_client_id: str
    automation_client_secret: str
    cli_client_id: str
    web_client_id: str = dex.WEB_CLIENT
    web_client_secret: str = ""


@dataclass(frozen=True)
class _Identity:
    """The started LDAP directory and Dex: what clients get, and what the start still awaits."""

    info: DexInfo
    dex: Process
    dex_port: int
    bind_api_port: int
    ldap_port: int


@dataclass
class StackInfo:
    """Everything a client of the stack needs; saved as ``stack.json`` (mode 0600)."""

    state_dir: str
    etcd: str
    ldap: str
    clusters: dict[str, ClusterInfo]
    dex: DexInfo
    pki: str
    ports: list[int] = field(default_factory=list)
    startup_seconds: float = 0.0
    bind_api_port: int = 0  # reserved: the Dex client klutch-bind-web redirects to it
    postgres: postgres.PostgresInfo | None = None  # the local backend's server
    crossplane: str = ""  # the Crossplane line running (crossplane.VERSIONS), e.g. "2"
    crossplane_release: str = ""  # the release that line builds, e.g. "v2.4.0"

    @classmethod
    def load(cls, path: Path) -> StackInfo:
        raw = json.loads(path.read_text())
        raw["clusters"] = {k: ClusterInfo(**v) for k, v in raw["clusters"].items()}
        raw["dex"] = DexInfo(**raw["dex"])
        if raw.get("postgres"):
            raw["postgres"] = postgres.PostgresInfo(**raw["postgres"])
        return cls(**raw)

    def env(self) -> dict[str, str]:
        """The variables of ``stack.env``: paths and URLs, plus the dev user's login."""
        env = {
            "KLUTCH_STATE_DIR": self.state_dir,
            "KLUTCH_ETCD_URL": self.etcd,
            "KLUTCH_LDAP_URL": self.ldap,
            "KLUTCH_DEX_ISSUER": self.dex.issuer,
            "KLUTCH_DEX_CA": self.dex.ca,
            "KLUTCH_DEX_USER": self.dex.email,
            "KLUTCH_DEX_PASSWORD": self.dex.password,
            "KLUTCH_DEX_CLIENT_ID": self.dex.automation_client_id,
            "KLUTCH_DEX_CLIENT_SECRET": self.dex.automation_client_secret,
            "KLUTCH_DEX_CLI_CLIENT_ID": self.dex.cli_client_id,
            "KLUTCH_BIND_API_PORT": str(self.bind_api_port),
        }
        for name, cluster in self.clusters.items():
            key = name.upper().replace("-", "_")
            env[f"KLUTCH_{key}_URL"] = cluster.url
            env[f"KLUTCH_{key}_KUBECONFIG"] = cluster.kubeconfig
        if self.postgres is not None:
            env.update(self.postgres.env())
        return env


class StatePaths:
    """The layout of a state directory, in one place."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.pki = root / "pki"
        self.logs = root / "logs"
        self.pids = root / "pids"
        self.etcd_data = root / "etcd"
        self.info = root / "stack.json"
        self.env = root / "stack.env"
        self.supervisor_pid = root / "supervisor.pid"
        self.ldap = ldap.LdapPaths(root / "ldap")
        self.crossplane = crossplane.CrossplanePaths(root / "crossplane")
        self.postgres = root / "postgres"

    def kubeconfig(self, cluster: str) -> Path:
        return self.root / f"{cluster}.kubeconfig"

    def reset(self) -> None:
        """Forget the previous run's data; keep the directory (and logs of a daemon writing)."""
        for path in (
            self.pki,
            self.pids,
            self.etcd_data,
            self.ldap.directory,
            self.crossplane.root,
            self.postgres,
            self.root / "dex",
            self.root / "certs",
        ):
            shutil.rmtree(path, ignore_errors=True)
        for path in (self.info, self.env, *(self.kubeconfig(c) for c in CLUSTERS)):
            path.unlink(missing_ok=True)
        for log in self.logs.glob("*.log") if self.logs.exists() else ():
            if log.name != "supervisor.log":
                log.unlink()


class LocalStack:
    """Start and stop the processes of one stack in the calling process."""

    def __init__(self, state_dir: Path, on_event: Callable[[str], None] = lambda _: None) -> None:
        self.paths = StatePaths(state_dir)
        self.on_event = on_event
        self.launcher = Launcher(self.paths.logs, self.paths.pids, on_event)
        self.info: StackInfo | None = None

    @property
    def processes(self) -> list[Process]:
        """The stack's processes in start order."""
        return self.launcher.processes

    def start(self) -> StackInfo:
        """Start everything and wait until it answers; on any failure stop what was started."""
        started = time.monotonic()
        bins = programs()
        try:
            self.info = self._start(bins)
        except BaseException:
            self.stop()
            raise
        self.info.startup_seconds = round(time.monotonic() - started, 2)
        self._write_info(self.info)
        self.on_event(f"stack ready in {self.info.startup_seconds:.1f}s")
        return self.info

    def stop(self) -> None:
        """Stop in reverse start order, so clients go before the servers they talk to."""
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()
        self.paths.info.unlink(missing_ok=True)

    def process(self, name: str) -> Process:
        """The stack's process called ``name`` (``etcd``, ``kube-apiserver-app``, ``dex``, …), for
        fault tests that kill it and start it again with the same command, ports and data."""
        for process in self.processes:
            if process.name == name:
                return process
        raise KeyError(f"no process {name!r}; running: {[p.name for p in self.processes]}")

    def _start(self, bins: dict[str, Path]) -> StackInfo:
        paths, launcher = self.paths, self.launcher
        paths.reset()
        paths.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        pki = write_pki(paths.pki, CLUSTERS)
        etcd = clusters.start_etcd(launcher, bins["etcd"], paths.etcd_data)
        apiservers = clusters.spawn_apiservers(
            launcher, bins["kube-apiserver"], pki, etcd.url, paths.root / "certs", CLUSTERS
        )
        identity = self._start_identity(bins, pki)
        ready = clusters.await_apiservers(launcher, apiservers, pki, paths.kubeconfig)
        # Crossplane's CRDs first (its controllers watch them from the start), then it starts up
        # while Dex and the controller managers do.
        function_port = crossplane.prepare(bins, pki, paths.crossplane, ready["control-plane"].url)
        function = crossplane.spawn_function(launcher, paths.crossplane, function_port)
        crossplane_process, *crossplane_ports = crossplane.spawn(
            launcher, bins["crossplane"], paths.crossplane
        )
        backend = start_local_backend(
            launcher, paths.postgres, ready["control-plane"].kubeconfig, LOCAL_PROVIDER_CONFIG
        )
        self._await_dex(identity, pki)
        kcm_ports = clusters.start_controller_managers(
            launcher, bins["kube-controller-manager"], pki, ready, paths.root / "certs"
        )
        launcher.await_ready(
            crossplane_process,
            "/healthz",
            lambda: status_ok(f"http://127.0.0.1:{crossplane_ports[1]}/healthz", None),
        )
        launcher.await_ready(function, "gRPC port", lambda: port_open(function_port))
        launcher.await_ready(
            backend.provider,
            "/healthz",
            lambda: status_ok(f"http://127.0.0.1:{backend.provider_health_port}/healthz", None),
        )
        return StackInfo(
            state_dir=str(paths.root),
            etcd=etcd.url,
            ldap=f"ldaps://127.0.0.1:{identity.ldap_port}",
            clusters=ready,
            pki=str(paths.pki),
            dex=identity.info,
            bind_api_port=identity.bind_api_port,
            postgres=backend.postgres,
            crossplane=crossplane.selected_version(),
            crossplane_release=crossplane.release(),
            ports=[
                *etcd.ports,
                identity.ldap_port,
                identity.dex_port,
                *(port for _, port in apiservers.values()),
                *kcm_ports.values(),
                *crossplane_ports,
                function_port,
                backend.postgres.port,
                backend.provider_health_port,
            ],
        )

    def _start_identity(self, bins: dict[str, Path], pki: Pki) -> _Identity:
        """The LDAP directory with the dev user, and Dex on top of it (started, not awaited)."""
        user = ldap.User(
            DEV_USER.email, DEV_USER.username, secrets.token_urlsafe(18), DEV_USER.groups
        )
        ldap_port, ldap_admin_password = free_port(), secrets.token_urlsafe(18)
        slapd = ldap.start_slapd(
            self.launcher, bins, pki, self.paths.ldap, ldap_port, ldap_admin_password, user
        )
        connector = ldap.dex_connector(ldap_port, ldap_admin_password, pki.serving_ca)
        info, config, dex_port, bind_api_port = self._configure_dex(pki, connector, user)
        self.launcher.await_ready(slapd, "ldaps port", lambda: port_open(ldap_port))
        dex_process = self.launcher.spawn("dex", [str(bins["dex"]), "serve", str(config)])
        return _Identity(info, dex_process, dex_port, bind_api_port, ldap_port)

    def _await_dex(self, identity: _Identity, pki: Pki) -> None:
        issuer = identity.info.issuer
        self.launcher.await_ready(
            identity.dex,
            "discovery",
            lambda: json_ok(
                f"{issuer}/.well-known/openid-configuration",
                tls_context(pki),
                lambda b: b.get("issuer") == issuer,
            ),
        )

    def _configure_dex(
        self, pki: Pki, connector: dict[str, Any], user: ldap.User
    ) -> tuple[DexInfo, Path, int, int]:
        """Dex's clients and config file, its port and the port reserved for the bind API (the
        web client redirects to it)."""
        dex_port, bind_api_port = free_port(), free_port()
        issuer = f"https://127.0.0.1:{dex_port}/dex"
        automation_secret, web_secret = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        config = self.paths.root / "dex" / "config.yaml"
        config.parent.mkdir(mode=0o700)
        config.touch(mode=0o600)
        config.write_text(
            yaml.safe_dump(
                dex.render(
                    issuer,
                    f"127.0.0.1:{dex_port}",
                    pki.serving_cert,
                    pki.serving_key,
                    connector,
                    automation_secret,
                    web_secret,
                    bind_api_port,
                )
            )
        )
        info = DexInfo(
            issuer=issuer,
            ca=str(pki.serving_ca),
            username=user.username,
            email=user.email,
            password=user.password,
            groups=list(user.groups),
            automation_client_id=dex.AUTOMATION_CLIENT,
            automation_client_secret=automation_secret,
            cli_client_id=dex.CLI_CLIENT,
            web_client_secret=web_secret,
        )
        return info, config, dex_port, bind_api_port

    def _write_info(self, info: StackInfo) -> None:
        # Atomically: ``dev up`` takes the file's existence as "the stack is up" and reads it (an
        # empty file touched first was read as invalid JSON once).
        partial = self.paths.info.with_suffix(".json.partial")
        partial.touch(mode=0o600)
        partial.write_text(json.dumps(asdict(info), indent=2))
        partial.replace(self.paths.info)
        self.paths.env.touch(mode=0o600)
        self.paths.env.write_text(
            "".join(f"export {k}={shlex.quote(v)}\n" for k, v in info.env().items())
        )


def programs() -> dict[str, Path]:
    """Every program the stack runs, or one error that names what is missing and the fix."""
    return {
        **binaries.require(
            "etcd",
            "kube-apiserver",
            "kube-controller-manager",
            "dex",
        ),
        **crossplane.programs(),
        **ldap.programs(),
        "postgres": postgres.bin_dir() / "postgres",
    }


def load_info(state_dir: Path) -> StackInfo:
    """The running stack's info, or a clear error when there is none."""
    path = StatePaths(state_dir).info
    if not path.exists():
        raise KlutchError(
            f"no local stack is running in {state_dir}",
            "start one with 'klutch-gitops dev up' (or 'make run')",
        )
    return StackInfo.load(path)
