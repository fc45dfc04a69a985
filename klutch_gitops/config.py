"""The reconciler's configuration, and the repository registrations it shares with
RepositoryBindings: what ``config_file`` and ``repository_config`` read, as frozen values.

Secrets are never values here, only references: a file, an environment variable, or a Secret on
the Control Plane. The values have no defaults of their own: the models in ``klutch_gitops.models``
hold them, and ``config_file.defaults`` gives them as runtime values.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
    name: str
    email: str


@dataclass(frozen=True)
class WriteBack:
    mode: str
    branch: str
    author: Bot | None  # None: the reconciler's bot identity


@dataclass(frozen=True)
class RegistrationSpec:
    """A repository the reconciler is told to follow, from the config file or a RepositoryBinding.
    Built by ``models.registration.registration_spec`` only, so it has no defaults of its own:
    they are the models'."""

    name: str
    url: str
    consumer_namespace: str
    app_namespaces: tuple[str, ...]
    app_kubeconfig: SecretRef
    control_plane_kubeconfig: SecretRef
    branch: str
    path: str
    credentials: GitCredentialsRef | None
    webhook_secret: SecretRef | None
    forge_token: SecretRef | None  # API token that posts pull-request plans
    write_back: WriteBack
    poll_interval: float | None
    suspend: bool
    app_sync: str  # "external": Argo CD or Flux applies to the App Cluster


@dataclass(frozen=True)
class PlatformSpec:
    url: str
    branch: str
    path: str
    credentials: GitCredentialsRef | None
    webhook_secret: SecretRef | None  # verifies push webhooks, as a repository's does


@dataclass(frozen=True)
class TokenRenewal:
    """When the reconciler renews the bounded tokens in the bind's binder kubeconfig Secrets."""

    lifetime: float  # of a renewed token
    renew_before: float | None  # None: once a third of a token's lifetime is left


@dataclass(frozen=True)
class LeaderElection:
    """One active reconciler among replicas, elected through a coordination.k8s.io Lease; with
    ``shards`` above 0, every replica reconciles the repositories of the shards whose Leases it
    holds (``reconciler/ha/shards.py``) and the leader runs only the cluster-wide controllers."""

    enabled: bool
    namespace: str  # of the Lease on the Control Plane; "" unless enabled
    name: str
    lease_duration: float  # how long a standby waits after the leader's last renewal
    renew_deadline: float  # the leader steps down when it could not renew for this long
    retry_period: float  # between attempts to acquire or renew
    shards: int  # 0: the leader reconciles every repository


@dataclass(frozen=True)
class Config:
    control_plane_kubeconfig: Path
    repositories: tuple[RegistrationSpec, ...]
    platform: PlatformSpec | None
    listen: str
    poll_interval: float
    batch_window: float
    workers: int
    work_dir: Path
    bot: Bot
    binder_tokens: TokenRenewal
    leader_election: LeaderElection
    # unlocks the names in /readyz and /metrics (Authorization: Bearer); None: never shown
    metrics_token: SecretRef | None
