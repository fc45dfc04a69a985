"""The local stack: etcd, two Kubernetes clusters, and Dex backed by OpenLDAP, on loopback.

``LocalStack.start`` makes the PKI, starts every process, waits until each is ready and writes what
a client needs (kubeconfigs, ``stack.json``, ``stack.env``) into the state directory. It runs in the
caller's process: the test harness owns it directly, ``dev up`` owns it through a daemon.
"""

from __future__ import annotations

import json
import secrets
import shlex
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import yaml

from klutch_gitops.dev.localstack import binaries, crossplane, dex, kubeconfig, ldap, postgres
from klutch_gitops.dev.localstack.pki import Pki, write_pki
from klutch_gitops.dev.localstack.processes import Process, free_port, port_open
from klutch_gitops.errors import KlutchError

CLUSTERS = ("app", "control-plane")
READY_TIMEOUT = 120.0
LOCAL_PROVIDER_CONFIG = "local-postgresql"  # the ProviderConfig catalog/compositions/local names
KCM_CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
)
DEV_USER = ldap.User(
    email="developer@klutch.example",
    username="developer",
    password="",
    groups=("klutch-developers", "team-a"),
)


@dataclass
class ClusterInfo:
    url: str
    kubeconfig: str


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
        self.processes: list[Process] = []
        self.info: StackInfo | None = None

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
        paths = self.paths
        paths.reset()
        paths.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        pki = write_pki(paths.pki, CLUSTERS)
        tls = _tls_context(pki, client=True)

        etcd_port, etcd_peer = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = self._spawn(
            "etcd",
            [
                str(bins["etcd"]),
                "--name=klutch-local",
                f"--data-dir={paths.etcd_data}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=klutch-local=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._await(
            etcd,
            "health",
            lambda: _json_ok(f"{etcd_url}/health", None, lambda b: b.get("health") == "true"),
        )

        api_ports = {cluster: free_port() for cluster in CLUSTERS}
        apiservers = {
            cluster: self._spawn(
                f"kube-apiserver-{cluster}",
                [
                    str(bins["kube-apiserver"]),
                    f"--etcd-servers={etcd_url}",
                    f"--etcd-prefix=/klutch/{cluster}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--secure-port={port}",
                    f"--cert-dir={paths.root / 'certs' / cluster}",
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
                ],
            )
            for cluster, port in api_ports.items()
        }

        user = ldap.User(
            DEV_USER.email, DEV_USER.username, secrets.token_urlsafe(18), DEV_USER.groups
        )
        ldap_port, ldap_admin_password = free_port(), secrets.token_urlsafe(18)
        slapd = self._start_ldap(bins, pki, ldap_port, ldap_admin_password, user)

        dex_port = free_port()
        issuer = f"https://127.0.0.1:{dex_port}/dex"
        automation_secret, web_secret = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        bind_api_port = free_port()
        dex_config = paths.root / "dex" / "config.yaml"
        dex_config.parent.mkdir(mode=0o700)
        dex_config.touch(mode=0o600)
        dex_config.write_text(
            yaml.safe_dump(
                dex.render(
                    issuer,
                    f"127.0.0.1:{dex_port}",
                    pki.serving_cert,
                    pki.serving_key,
                    ldap.dex_connector(ldap_port, ldap_admin_password, pki.serving_ca),
                    automation_secret,
                    web_secret,
                    bind_api_port,
                )
            )
        )
        self._await(slapd, "ldaps port", lambda: port_open(ldap_port))
        dex_process = self._spawn("dex", [str(bins["dex"]), "serve", str(dex_config)])

        clusters: dict[str, ClusterInfo] = {}
        for cluster, port in api_ports.items():
            url = f"https://127.0.0.1:{port}"
            self._await(
                apiservers[cluster], "/readyz", lambda url=url: _status_ok(f"{url}/readyz", tls)
            )
            config = kubeconfig.render(
                cluster,
                url,
                pki.serving_ca.read_bytes(),
                pki.admin_cert.read_bytes(),
                pki.admin_key.read_bytes(),
            )
            clusters[cluster] = ClusterInfo(
                url, str(kubeconfig.write(paths.kubeconfig(cluster), config))
            )

        # Crossplane's CRDs first (its controllers watch them from the start), then it starts up
        # while Dex and the controller managers do.
        self._prepare_crossplane(bins, pki, clusters["control-plane"])
        crossplane_ports = (free_port(), free_port())  # metrics, health probe
        argv, env = crossplane.command(bins["crossplane"], paths.crossplane, *crossplane_ports)
        crossplane_process = self._spawn("crossplane", argv, env)
        # The local backend: a PostgreSQL server and the provider that composes databases on it
        # (it installs its CRDs and the ProviderConfig local-postgresql the local-* Compositions
        # name). Spawned after the server, so the reverse-order stop ends the provider first.
        pg = postgres.start_postgres(paths.postgres, self._spawn)
        provider_health = free_port()
        local_provider = self._spawn(
            "local-provider",
            [
                sys.executable,
                "-m",
                "klutch_gitops.cli",
                "local-provider",
                f"--kubeconfig={clusters['control-plane'].kubeconfig}",
                f"--postgres-host={pg.host}",
                f"--postgres-port={pg.port}",
                f"--postgres-user={pg.superuser}",
                f"--postgres-password-file={pg.password_file}",
                f"--backup-dir={pg.backup_dir}",
                f"--pg-bin-dir={pg.bin_dir}",
                f"--provider-config={LOCAL_PROVIDER_CONFIG}",
                f"--health-port={provider_health}",
                "--poll-interval=10",  # drift on a local server is repaired within seconds
            ],
        )

        self._await(
            dex_process,
            "discovery",
            lambda: _json_ok(
                f"{issuer}/.well-known/openid-configuration",
                _tls_context(pki),
                lambda b: b.get("issuer") == issuer,
            ),
        )
        kcm_ports = self._start_controller_managers(bins, pki, clusters)
        self._await(
            crossplane_process,
            "/healthz",
            lambda: _status_ok(f"http://127.0.0.1:{crossplane_ports[1]}/healthz", None),
        )
        self._await(
            local_provider,
            "/healthz",
            lambda: _status_ok(f"http://127.0.0.1:{provider_health}/healthz", None),
        )

        return StackInfo(
            state_dir=str(paths.root),
            etcd=etcd_url,
            ldap=f"ldaps://127.0.0.1:{ldap_port}",
            clusters=clusters,
            pki=str(paths.pki),
            dex=DexInfo(
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
            ),
            bind_api_port=bind_api_port,
            postgres=pg,
            ports=[
                etcd_port,
                etcd_peer,
                ldap_port,
                dex_port,
                *api_ports.values(),
                *kcm_ports.values(),
                *crossplane_ports,
                pg.port,
                provider_health,
            ],
        )

    def _start_controller_managers(
        self, bins: dict[str, Path], pki: Pki, clusters: dict[str, ClusterInfo]
    ) -> dict[str, int]:
        """One kube-controller-manager per cluster, started together, then awaited."""
        kcm_ports = {cluster: free_port() for cluster in CLUSTERS}
        started: dict[str, Process] = {}
        for cluster, port in kcm_ports.items():
            kcm_kubeconfig = kubeconfig.write(
                self.paths.root / "certs" / cluster / "controller-manager.kubeconfig",
                _controller_manager_kubeconfig(pki, clusters[cluster].url),
            )
            started[cluster] = self._spawn(
                f"kube-controller-manager-{cluster}",
                [
                    str(bins["kube-controller-manager"]),
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
        for cluster, port in kcm_ports.items():
            self._await(
                started[cluster],
                "/healthz",
                lambda port=port: _status_ok(
                    f"https://127.0.0.1:{port}/healthz", _tls_context(pki)
                ),
            )
        return kcm_ports

    def _prepare_crossplane(
        self, bins: dict[str, Path], pki: Pki, control_plane: ClusterInfo
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

        paths = self.paths.crossplane
        paths.cache.mkdir(parents=True, mode=0o700)
        identity = pki.client_cert("crossplane", ("system:masters",))
        kubeconfig.write(
            paths.kubeconfig,
            kubeconfig.render(
                "crossplane",
                control_plane.url,
                pki.serving_ca.read_bytes(),
                identity.cert_pem,
                identity.key_pem,
                namespace="crossplane-system",
            ),
        )
        function_client = pki.client_cert("crossplane")  # mTLS to function servers, if ever
        crossplane.write_client_tls(paths, pki.serving_ca.read_bytes(), function_client)
        api = new_client_from_config(config_file=str(paths.kubeconfig))
        try:
            install_crds(api, crossplane.load_crds(bins["crossplane-crds"]))
            install_policies(api, load_policies())
        finally:
            api.close()

    def _start_ldap(
        self, bins: dict[str, Path], pki: Pki, port: int, admin_password: str, user: ldap.User
    ) -> Process:
        """Load the directory offline with slapadd, then serve it over ldaps."""
        paths = self.paths.ldap
        paths.data.mkdir(parents=True, mode=0o700)
        paths.config.touch(mode=0o600)
        paths.config.write_text(
            ldap.render_config(
                paths, admin_password, pki.serving_ca, pki.serving_cert, pki.serving_key
            )
        )
        paths.seed.touch(mode=0o600)
        paths.seed.write_text(ldap.render_seed((user,)))
        loaded = subprocess.run(
            [str(bins["slapadd"]), "-f", str(paths.config), "-l", str(paths.seed)],
            capture_output=True,
            text=True,
            check=False,
        )
        if loaded.returncode != 0:
            raise KlutchError(
                f"slapadd could not load the LDAP directory:\n{loaded.stderr}",
                f"check {paths.config} and {paths.seed}",
            )
        return self._spawn(
            "slapd",
            [
                str(bins["slapd"]),
                "-d",
                "0",
                "-f",
                str(paths.config),
                "-h",
                f"ldaps://127.0.0.1:{port}/",
            ],
        )

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> Process:
        process = Process(
            name, argv, self.paths.logs / f"{name}.log", self.paths.pids / f"{name}.pid", env
        )
        self.processes.append(process)
        process.start()
        self.on_event(f"started {name} (pid {process.popen.pid if process.popen else '?'})")
        return process

    def _await(self, process: Process, what: str, ready: Callable[[], bool]) -> None:
        seconds = process.wait_until(ready, what, READY_TIMEOUT)
        self.on_event(f"{process.name} ready ({what}) after {seconds:.1f}s")

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
            "crossplane",
            "crossplane-crds",
        ),
        **ldap.programs(),
        "postgres": postgres.bin_dir() / "postgres",
    }


def _controller_manager_kubeconfig(pki: Pki, url: str) -> dict:
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


def _tls_context(pki: Pki, client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.serving_ca))
    if client:
        context.load_cert_chain(str(pki.admin_cert), str(pki.admin_key))
    return context


def _status_ok(url: str, tls: ssl.SSLContext | None) -> bool:
    try:
        return httpx.get(url, verify=tls or True, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _json_ok(url: str, tls: ssl.SSLContext | None, check: Callable[[dict], bool]) -> bool:
    try:
        response = httpx.get(url, verify=tls or True, timeout=2.0)
        return response.status_code == 200 and check(response.json())
    except (httpx.HTTPError, ValueError):
        return False


def load_info(state_dir: Path) -> StackInfo:
    """The running stack's info, or a clear error when there is none."""
    path = StatePaths(state_dir).info
    if not path.exists():
        raise KlutchError(
            f"no local stack is running in {state_dir}",
            "start one with 'klutch-gitops dev up' (or 'make run')",
        )
    return StackInfo.load(path)
