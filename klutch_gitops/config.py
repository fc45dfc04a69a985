"""The reconciler's configuration file, and the repository registrations it shares with
RepositoryBindings.

Every problem in a config file is collected and reported at once, each naming the field path and
the fix, so one edit fixes them all. Secrets are never values here, only references: a file, an
environment variable, or a Secret on the Control Plane.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import (
    TENANT_TRANSPORTS,
    InvalidRepoURL,
    check_branch,
    check_repo_path,
    url_transport,
)

URL_PATTERN = re.compile(r"^(file://|https://|http://|ssh://|[\w.-]+@[\w.-]+:)")
NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
# A repository's name is also a label value on every object it creates, so dots are fine.
REPOSITORY_NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
DURATION_PATTERN = re.compile(r"^(\d+(\.\d+)?)(ms|s|m|h)$")
WRITE_BACK_MODES = ("inline", "files", "branch")
# Who applies a repository's claims to the App Cluster: the reconciler, or Argo CD / Flux.
APP_SYNC_MODES = ("reconciler", "external")
TOKEN_REQUEST_MINIMUM = 600.0  # seconds: the shortest token the TokenRequest API issues
LEASE_NAME = "klutch-gitops-reconciler"
MAX_SHARDS = 256  # every replica renews its shard Leases each retry period


@dataclass(frozen=True)
class SecretRef:
    """A value kept outside the config: exactly one of file, env, or a Secret's key."""

    file: Path | None = None
    env: str | None = None
    namespace: str | None = None
    name: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class GitCredentialsRef:
    """Git credentials: a Secret (keys username/password or ssh-privatekey/known_hosts) or files."""

    secret: SecretRef | None = None  # namespace/name of a Secret on the Control Plane
    username: str | None = None
    password: SecretRef | None = None
    ssh_key_file: Path | None = None
    known_hosts_file: Path | None = None


@dataclass(frozen=True)
class Bot:
    name: str = "klutch-gitops[bot]"
    email: str = "klutch-gitops@users.noreply.klutch.example"


@dataclass(frozen=True)
class WriteBack:
    mode: str = "inline"
    branch: str = "klutch-status"
    author: Bot | None = None  # None: the reconciler's bot identity


@dataclass(frozen=True)
class RepositorySpec:
    """One repository the reconciler follows, from the config file or a RepositoryBinding."""

    name: str
    url: str
    consumer_namespace: str
    app_namespaces: tuple[str, ...]
    app_kubeconfig: SecretRef
    control_plane_kubeconfig: SecretRef
    branch: str = "main"
    path: str = "."
    credentials: GitCredentialsRef | None = None
    webhook_secret: SecretRef | None = None
    forge_token: SecretRef | None = None  # API token that posts pull-request plans
    write_back: WriteBack = field(default_factory=WriteBack)
    poll_interval: float | None = None
    suspend: bool = False
    app_sync: str = "reconciler"  # "external": Argo CD or Flux applies to the App Cluster
    source: str = "config"  # "config" or "RepositoryBinding <namespace>/<name>"


@dataclass(frozen=True)
class PlatformSpec:
    url: str
    branch: str = "main"
    path: str = "."
    credentials: GitCredentialsRef | None = None
    webhook_secret: SecretRef | None = None  # verifies push webhooks, as a repository's does


@dataclass(frozen=True)
class TokenRenewal:
    """When the reconciler renews the bounded tokens in the bind's binder kubeconfig Secrets."""

    lifetime: float = 24 * 3600.0  # of a renewed token, as long as the bind API's
    renew_before: float | None = None  # None: once a third of a token's lifetime is left


@dataclass(frozen=True)
class LeaderElection:
    """One active reconciler among replicas, elected through a coordination.k8s.io Lease; with
    ``shards`` above 0, every replica reconciles the repositories of the shards whose Leases it
    holds (``reconciler/ha/shards.py``) and the leader runs only the cluster-wide controllers."""

    enabled: bool = False
    namespace: str = ""  # of the Lease on the Control Plane; required when enabled
    name: str = LEASE_NAME
    lease_duration: float = 15.0  # how long a standby waits after the leader's last renewal
    renew_deadline: float = 10.0  # the leader steps down when it could not renew for this long
    retry_period: float = 2.0  # between attempts to acquire or renew
    shards: int = 0  # 0: the leader reconciles every repository


@dataclass(frozen=True)
class Config:
    control_plane_kubeconfig: Path
    repositories: tuple[RepositorySpec, ...] = ()
    platform: PlatformSpec | None = None
    listen: str = "127.0.0.1:8080"
    poll_interval: float = 30.0
    batch_window: float = 2.0
    workers: int = 4
    work_dir: Path = Path.home() / ".cache" / "klutch-gitops" / "repos"
    bot: Bot = field(default_factory=Bot)
    binder_tokens: TokenRenewal = field(default_factory=TokenRenewal)
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    # unlocks the names in /readyz and /metrics (Authorization: Bearer); None: never shown
    metrics_token: SecretRef | None = None


class FieldReader:
    """Walks a parsed document, collecting every problem as ``path: message (fix)``."""

    def __init__(self, origin: str, base: Path) -> None:
        self.origin = origin
        self.base = base
        self.problems: list[str] = []

    def problem(self, where: str, message: str, fix: str) -> None:
        self.problems.append(f"{where}: {message} — {fix}")

    def parse(self, text: str) -> Any:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise KlutchError(
                f"{self.origin}: not valid YAML: {error}", "fix the YAML syntax"
            ) from None

    def check(self) -> None:
        """Raise one KlutchError listing every problem found, if any."""
        if self.problems:
            raise KlutchError(
                f"{self.origin}: {len(self.problems)} problem(s):\n  " + "\n  ".join(self.problems),
                "edit the config file and run again",
            )

    def own_kubeconfig(self, data: Any, who: str) -> Path | None:
        """A service's own identity: ``controlPlane.kubeconfig``, a file (never a Secret)."""
        ref = self.kubeconfig(data, "controlPlane")
        if ref is not None and ref.file is None:
            self.problem(
                "controlPlane",
                f"{who}'s own identity must be a kubeconfig file",
                "set controlPlane.kubeconfig",
            )
        return ref.file if ref is not None else None

    def mapping(self, data: Any, where: str, known: set[str]) -> Mapping[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            self.problem(
                where,
                f"must be a mapping, got {type(data).__name__}",
                "write it as `key: value` lines",
            )
            return {}
        for key in data:
            if key not in known:
                self.problem(
                    f"{where}.{key}" if where else str(key),
                    "unknown field",
                    f"remove it; known fields here: {', '.join(sorted(known))}",
                )
        return data

    def string(
        self,
        data: Mapping[str, Any],
        key: str,
        where: str,
        *,
        required: bool = False,
        default: str | None = None,
        pattern: re.Pattern[str] | None = None,
        fix: str = "",
    ) -> str | None:
        value = data.get(key, default)
        path = f"{where}.{key}" if where else key
        if value is None:
            if required:
                self.problem(path, "is required", fix or f"set {key}")
            return None
        if not isinstance(value, str) or not value:
            self.problem(path, f"must be a non-empty string, got {value!r}", fix or f"set {key}")
            return None
        if pattern and not pattern.match(value):
            self.problem(path, f"{value!r} is not valid", fix)
            return None
        return value

    def duration(self, data: Mapping[str, Any], key: str, where: str) -> float | None:
        value = self.string(
            data,
            key,
            where,
            pattern=DURATION_PATTERN,
            fix="write a duration like 500ms, 30s, 5m or 1h",
        )
        if value is None:
            return None
        match = DURATION_PATTERN.match(value)
        assert match
        return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[3]]

    def token_renewal(self, data: Any, where: str) -> TokenRenewal:
        """``binderTokens``; a threshold not below the lifetime would renew without end."""
        data = self.mapping(data, where, {"lifetime", "renewBefore"})
        lifetime = self.duration(data, "lifetime", where)
        if lifetime is None:
            lifetime = TokenRenewal.lifetime
        elif lifetime < TOKEN_REQUEST_MINIMUM:
            self.problem(
                f"{where}.lifetime",
                "is shorter than the TokenRequest API's minimum of 10m",
                "set a lifetime of 10m or more, e.g. 24h",
            )
        renew_before = self.duration(data, "renewBefore", where)
        if renew_before is not None and not 0 < renew_before < lifetime:
            self.problem(
                f"{where}.renewBefore",
                f"must be above 0 and below the lifetime ({lifetime:.0f}s), "
                "else every renewed token would be due at once",
                "set e.g. renewBefore: 8h for a 24h lifetime, or leave it out for a third",
            )
        return TokenRenewal(lifetime=lifetime, renew_before=renew_before)

    def leader_election(self, data: Any, where: str) -> LeaderElection:
        """``leaderElection``; the durations must leave the leader time to step down before a
        standby may take over: leaseDuration > renewDeadline > retryPeriod."""
        data = self.mapping(
            data,
            where,
            {
                "enabled",
                "namespace",
                "name",
                "leaseDuration",
                "renewDeadline",
                "retryPeriod",
                "shards",
            },
        )
        enabled = data.get("enabled", False)
        if not isinstance(enabled, bool):
            self.problem(
                f"{where}.enabled", f"must be true or false, got {enabled!r}", "set enabled: true"
            )
            enabled = False
        fix = "use lowercase letters, digits and '-', at most 63"
        namespace = self.string(
            data, "namespace", where, required=enabled, pattern=NAME_PATTERN, fix=fix
        )
        name = self.string(data, "name", where, default=LEASE_NAME, pattern=NAME_PATTERN, fix=fix)
        defaults = LeaderElection()
        lease_duration, renew_deadline, retry_period = (
            default if value is None else value
            for value, default in (
                (self.duration(data, "leaseDuration", where), defaults.lease_duration),
                (self.duration(data, "renewDeadline", where), defaults.renew_deadline),
                (self.duration(data, "retryPeriod", where), defaults.retry_period),
            )
        )
        if not lease_duration > renew_deadline > retry_period > 0:
            self.problem(
                where,
                "needs leaseDuration > renewDeadline > retryPeriod, else two reconcilers could "
                "lead at once",
                "keep the defaults 15s, 10s and 2s, or scale them together",
            )
        shards = data.get("shards", 0)
        if isinstance(shards, bool) or not isinstance(shards, int) or not 0 <= shards <= MAX_SHARDS:
            self.problem(
                f"{where}.shards",
                f"{shards!r} is not a number from 0 to {MAX_SHARDS}",
                "set shards: 16 to spread repositories over the replicas, or 0 for one leader",
            )
            shards = 0
        elif shards and not enabled:
            self.problem(
                f"{where}.shards",
                "shards need the Leases of leader election",
                "set enabled: true (and the namespace of the Leases)",
            )
        return LeaderElection(
            enabled=enabled,
            namespace=namespace or "",
            name=name or LEASE_NAME,
            lease_duration=lease_duration,
            renew_deadline=renew_deadline,
            retry_period=retry_period,
            shards=shards,
        )

    def path(self, value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base / path

    def secret_ref(
        self, data: Any, where: str, *, key_default: str | None = None
    ) -> SecretRef | None:
        if data is None:
            return None
        data = self.mapping(data, where, {"file", "env", "secretRef"})
        chosen = [k for k in ("file", "env", "secretRef") if k in data]
        if len(chosen) != 1:
            self.problem(
                where,
                "needs exactly one of file, env, secretRef",
                "name a file, an environment variable, or a Secret on the Control Plane",
            )
            return None
        if "file" in data:
            value = self.string(data, "file", where)
            return SecretRef(file=self.path(value)) if value else None
        if "env" in data:
            value = self.string(data, "env", where)
            return SecretRef(env=value) if value else None
        ref_where = f"{where}.secretRef"
        ref = self.mapping(data["secretRef"], ref_where, {"namespace", "name", "key"})
        return SecretRef(
            namespace=self.string(ref, "namespace", ref_where),
            name=self.string(
                ref, "name", ref_where, required=True, fix="name the Secret on the Control Plane"
            ),
            key=self.string(
                ref,
                "key",
                ref_where,
                default=key_default,
                required=True,
                fix="name the key inside the Secret",
            ),
        )

    def kubeconfig(self, data: Any, where: str) -> SecretRef | None:
        """``{kubeconfig: FILE}`` or ``{kubeconfigSecretRef: {namespace, name, key}}``."""
        data = self.mapping(data, where, {"kubeconfig", "kubeconfigSecretRef"})
        if "kubeconfig" in data:
            value = self.string(data, "kubeconfig", where)
            return SecretRef(file=self.path(value)) if value else None
        if "kubeconfigSecretRef" in data:
            return self.secret_ref(
                {"secretRef": data["kubeconfigSecretRef"]},
                f"{where}.kubeconfigSecretRef",
                key_default="kubeconfig",
            )
        self.problem(
            where,
            "needs kubeconfig or kubeconfigSecretRef",
            "name a kubeconfig file or a Secret holding one",
        )
        return None

    def credentials(self, data: Any, where: str) -> GitCredentialsRef | None:
        if data is None:
            return None
        data = self.mapping(
            data, where, {"secretRef", "username", "password", "sshKeyFile", "knownHostsFile"}
        )
        secret = None
        if "secretRef" in data:
            ref = self.mapping(data["secretRef"], f"{where}.secretRef", {"namespace", "name"})
            secret = SecretRef(
                namespace=self.string(ref, "namespace", f"{where}.secretRef"),
                name=self.string(ref, "name", f"{where}.secretRef", required=True),
            )
        ssh_key = self.string(data, "sshKeyFile", where)
        known_hosts = self.string(data, "knownHostsFile", where)
        return GitCredentialsRef(
            secret=secret,
            username=self.string(data, "username", where),
            password=self.secret_ref(data.get("password"), f"{where}.password"),
            ssh_key_file=self.path(ssh_key) if ssh_key else None,
            known_hosts_file=self.path(known_hosts) if known_hosts else None,
        )

    def write_back(self, data: Any, where: str) -> WriteBack:
        data = self.mapping(data, where, {"mode", "branch", "author"})
        mode = self.string(data, "mode", where, default="inline")
        if mode and mode not in WRITE_BACK_MODES:
            self.problem(
                f"{where}.mode",
                f"{mode!r} is not a write-back mode",
                f"use one of {', '.join(WRITE_BACK_MODES)}",
            )
            mode = "inline"
        author = None
        if data.get("author") is not None:
            raw = self.mapping(data["author"], f"{where}.author", {"name", "email"})
            name = self.string(raw, "name", f"{where}.author", required=True)
            email = self.string(raw, "email", f"{where}.author", required=True)
            author = Bot(name, email) if name and email else None
        return WriteBack(
            mode=mode or "inline",
            branch=self.string(data, "branch", where, default="klutch-status") or "klutch-status",
            author=author,
        )


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
    url = reader.string(
        data,
        "url",
        where,
        required=True,
        pattern=URL_PATTERN,
        fix="use a file://, https://, ssh:// or git@host:path URL",
    )
    consumer = reader.string(
        data,
        "consumerNamespace",
        where,
        required=True,
        pattern=NAME_PATTERN,
        fix="name the consumer namespace on the Control Plane",
    )
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
        namespaces = []
    app = reader.kubeconfig(data.get("appCluster"), f"{where}.appCluster")
    control_plane = reader.kubeconfig(data.get("controlPlane"), f"{where}.controlPlane")
    path = reader.string(data, "path", where, default=".") or "."
    if Path(path).is_absolute() or ".." in Path(path).parts:
        reader.problem(
            f"{where}.path",
            f"{path!r} leaves the repository",
            "use a folder inside the repository, e.g. claims/",
        )
    app_sync = reader.string(data, "appSync", where, default="reconciler")
    if app_sync is not None and app_sync not in APP_SYNC_MODES:
        reader.problem(
            f"{where}.appSync",
            f"{app_sync!r} is not an App Cluster sync mode",
            "use reconciler (the default), or external when Argo CD or Flux applies the claims",
        )
    spec = RepositorySpec(
        name=name or "",
        url=url or "",
        consumer_namespace=consumer or "",
        app_namespaces=tuple(namespaces),
        app_kubeconfig=app or SecretRef(),
        control_plane_kubeconfig=control_plane or SecretRef(),
        branch=reader.string(data, "branch", where, default="main") or "main",
        path=path,
        credentials=reader.credentials(data.get("credentials"), f"{where}.credentials"),
        webhook_secret=reader.secret_ref(data.get("webhookSecret"), f"{where}.webhookSecret"),
        forge_token=reader.secret_ref(data.get("forgeToken"), f"{where}.forgeToken"),
        write_back=reader.write_back(data.get("writeBack"), f"{where}.writeBack"),
        poll_interval=reader.duration(data, "pollInterval", where),
        suspend=bool(data.get("suspend", False)),
        app_sync=app_sync or "reconciler",
    )
    return spec if len(reader.problems) == before else None


def parse_config(text: str, origin: str, base: Path) -> Config:
    """Parse and validate; raise one KlutchError listing every problem found."""
    reader = FieldReader(origin, base)
    data = reader.mapping(
        reader.parse(text),
        "",
        {
            "apiVersion",
            "kind",
            "controlPlane",
            "platform",
            "repositories",
            "listen",
            "pollInterval",
            "batchWindow",
            "workers",
            "workDir",
            "bot",
            "binderTokens",
            "leaderElection",
            "metricsToken",
        },
    )
    control_plane = reader.own_kubeconfig(data.get("controlPlane"), "the reconciler")
    repositories = []
    raw_repositories = data.get("repositories") or []
    if not isinstance(raw_repositories, list):
        reader.problem("repositories", "must be a list", "write each repository as `- name: …`")
        raw_repositories = []
    for index, entry in enumerate(raw_repositories):
        spec = read_repository(reader, entry, f"repositories[{index}]")
        if spec:
            repositories.append(spec)
    names = [r.name for r in repositories]
    for duplicate in sorted({n for n in names if names.count(n) > 1}):
        reader.problem(
            "repositories",
            f"the name {duplicate!r} is used more than once",
            "give every repository its own name",
        )
    platform = None
    if data.get("platform") is not None:
        raw = reader.mapping(
            data["platform"], "platform", {"url", "branch", "path", "credentials", "webhookSecret"}
        )
        url = reader.string(
            raw,
            "url",
            "platform",
            required=True,
            pattern=URL_PATTERN,
            fix="use a file://, https://, ssh:// or git@host:path URL",
        )
        if url:
            platform = PlatformSpec(
                url=url,
                branch=reader.string(raw, "branch", "platform", default="main") or "main",
                path=reader.string(raw, "path", "platform", default=".") or ".",
                credentials=reader.credentials(raw.get("credentials"), "platform.credentials"),
                webhook_secret=reader.secret_ref(
                    raw.get("webhookSecret"), "platform.webhookSecret"
                ),
            )
    workers = data.get("workers", 4)
    if not isinstance(workers, int) or not 1 <= workers <= 64:
        reader.problem("workers", f"{workers!r} is not a number from 1 to 64", "set workers: 4")
        workers = 4
    bot = reader.mapping(data.get("bot"), "bot", {"name", "email"})
    work_dir = reader.string(data, "workDir", "")
    binder_tokens = reader.token_renewal(data.get("binderTokens"), "binderTokens")
    leader_election = reader.leader_election(data.get("leaderElection"), "leaderElection")
    metrics_token = reader.secret_ref(data.get("metricsToken"), "metricsToken")
    if metrics_token is not None and metrics_token.name and not metrics_token.namespace:
        reader.problem(
            "metricsToken.secretRef.namespace",
            "is required",
            "name the namespace of the Secret on the Control Plane (the reconciler's own)",
        )
    reader.check()
    assert control_plane is not None  # no problems means it was read
    return Config(
        control_plane_kubeconfig=control_plane,
        repositories=tuple(repositories),
        platform=platform,
        listen=reader.string(data, "listen", "") or "127.0.0.1:8080",
        poll_interval=reader.duration(data, "pollInterval", "") or 30.0,
        batch_window=reader.duration(data, "batchWindow", "") or 2.0,
        workers=workers,
        work_dir=reader.path(work_dir) if work_dir else Config.work_dir,
        bot=Bot(**{k: v for k, v in bot.items() if isinstance(v, str)}),
        binder_tokens=binder_tokens,
        leader_election=leader_election,
        metrics_token=metrics_token,
    )


def read_config_file(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise KlutchError(
            f"cannot read config {path}: {error.strerror}", "pass an existing file with --config"
        ) from None


def load_config(path: Path) -> Config:
    return parse_config(read_config_file(path), str(path), path.parent)


def from_repository_binding(obj: Mapping[str, Any]) -> RepositorySpec:
    """A RepositoryBinding as a registration; its Secret references live in its own namespace."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace", "")
    spec = dict(obj.get("spec") or {})
    reader = FieldReader(f"RepositoryBinding {namespace}/{meta.get('name')}", Path("/"))
    entry = {
        "name": f"{namespace}.{meta.get('name')}"[:63].rstrip("-."),
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
    result = read_repository(reader, entry, "spec")
    if result is not None:
        _check_tenant_repository(reader, result)
    if result is None or reader.problems:
        raise KlutchError(
            f"{reader.origin}: " + "; ".join(reader.problems), "fix the RepositoryBinding's spec"
        )
    return RepositorySpec(**{**result.__dict__, "source": reader.origin})


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
