"""The reconciler's config file (``examples/reconciler.yaml``) as one model: every field, its
type, bounds, default and description. ``config_file`` validates a file with it and builds the
runtime ``Config``; ``models.schemas`` publishes it as JSON Schema."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Annotated

from pydantic import Field

from klutch_gitops.models.refs import GitCredentials, KubeconfigRef, OwnKubeconfig, SecretSource
from klutch_gitops.models.registration import (
    Branch,
    References,
    RegistrationFields,
    RegistrationName,
    RepoPath,
    WriteBackFields,
)
from klutch_gitops.models.types import (
    Checked,
    Duration,
    Listen,
    Name,
    Rule,
    Strict,
    Text,
)
from klutch_gitops.urls import PLATFORM_TRANSPORTS, InvalidRepoURL, url_transport

TOKEN_REQUEST_MINIMUM = 600.0  # seconds: the shortest token the TokenRequest API issues
MAX_SHARDS = 256  # every replica renews its shard Leases each retry period
URL_PATTERN = r"^(file://|https://|http://|ssh://|[\w.-]+@[\w.-]+:)"
URL_FIX = "use a file://, https://, ssh:// or git@host:path URL"
LEASE_NAME = "klutch-gitops-reconciler"
WORK_DIR = Path.home() / ".cache" / "klutch-gitops" / "repos"  # the clones', unless workDir says


def _url(value: str) -> tuple[str, str] | None:
    if not re.match(URL_PATTERN, value):
        return f"{value!r} is not valid", URL_FIX
    try:
        url_transport(value, PLATFORM_TRANSPORTS)
    except InvalidRepoURL as error:
        return error.message, error.fix
    return None


RepoURL = Annotated[str, Checked(_url, {"pattern": URL_PATTERN, "maxLength": 2048})]


class Bot(Strict):
    """The author of status commits."""

    name: Text = Field("klutch-gitops[bot]", description="Author name of status commits.")
    email: Text = Field(
        "klutch-gitops@users.noreply.klutch.example", description="Author email of status commits."
    )


class Author(Strict):
    """The author of one repository's status commits."""

    name: Text = Field(description="Author name.")
    email: Text = Field(description="Author email address.")


class WriteBack(WriteBackFields[Branch, Author]):
    """How observed status is committed back to the repository."""


class Repository(RegistrationFields[Branch, RepoPath, KubeconfigRef, WriteBack]):
    """One repository the reconciler follows (RepositoryBindings add more at run time)."""

    url: RepoURL = Field(
        description="Repository URL: https://, ssh:// (or user@host:path), http:// or file://."
    )
    name: RegistrationName = Field(
        description="Unique name; a label value on every object the repository creates."
    )
    consumer_namespace: Name = Field(
        description="The consumer namespace on the Control Plane (made by klutch-bind bind)."
    )
    credentials: GitCredentials | None = Field(
        None, description="Git credentials; none for public repositories."
    )
    webhook_secret: SecretSource | None = Field(
        None,
        description="Shared secret that signs this repository's push and pull-request webhooks.",
    )
    forge_token: SecretSource | None = Field(
        None,
        description="API token of the Git host that comments plans on pull requests; "
        "without it pull requests are not planned.",
    )

    def references(self, base: Path) -> References:
        """Files relative to the config file's folder ``base``; Secrets where they say."""
        return References(
            app_kubeconfig=self.app_cluster.ref(base),
            control_plane_kubeconfig=self.control_plane.ref(base),
            credentials=self.credentials.ref(base) if self.credentials else None,
            webhook_secret=self.webhook_secret.ref(base) if self.webhook_secret else None,
            forge_token=self.forge_token.ref(base) if self.forge_token else None,
        )


class Platform(Strict):
    """The platform team's repository: APIServiceExportTemplates, XRDs and Compositions applied to
    the Control Plane."""

    url: RepoURL = Field(description="Repository URL, as for repositories.")
    branch: Branch = Field("main", description="Branch to follow.")
    path: RepoPath = Field(".", description="Folder of the manifests inside the repository.")
    credentials: GitCredentials | None = Field(None, description="Git credentials, if any.")
    webhook_secret: SecretSource | None = Field(
        None, description="Shared secret that verifies push webhooks, which fetch at once."
    )


class BinderTokens(Strict):
    """When the reconciler renews the bounded tokens in the bind's binder kubeconfig Secrets."""

    lifetime: Duration = Field(
        24 * 3600.0,
        description="Lifetime of a renewed token, at least 10m (the TokenRequest API's minimum).",
        json_schema_extra={"default": "24h"},
    )
    renew_before: Duration | None = Field(
        None, description="Renew when less is left; a third of the lifetime when unset."
    )

    def rules(self) -> list[Rule]:
        found: list[Rule] = []
        if self.lifetime < TOKEN_REQUEST_MINIMUM:
            found.append(
                (
                    "lifetime",
                    "is shorter than the TokenRequest API's minimum of 10m",
                    "set a lifetime of 10m or more, e.g. 24h",
                    ("lifetime",),
                )
            )
        if self.renew_before is not None and not self.renew_before < self.lifetime:
            found.append(
                (
                    "renewBefore",
                    f"must be above 0 and below the lifetime ({self.lifetime:.0f}s), "
                    "else every renewed token would be due at once",
                    "set e.g. renewBefore: 8h for a 24h lifetime, or leave it out for a third",
                    ("lifetime", "renewBefore"),
                )
            )
        return found


class LeaderElection(Strict):
    """One active reconciler among replicas, elected through a coordination.k8s.io Lease; with
    shards, every replica reconciles the repositories of the shard Leases it holds."""

    enabled: bool = Field(False, description="Elect a leader among the replicas.")
    namespace: Name | None = Field(
        None, description="Namespace of the Lease on the Control Plane; required when enabled."
    )
    name: Name = Field(LEASE_NAME, description="Name of the Lease (shards: <name>-shard-N).")
    lease_duration: Duration = Field(
        15.0,
        description="A standby takes over this long after the leader's last renewal.",
        json_schema_extra={"default": "15s"},
    )
    renew_deadline: Duration = Field(
        10.0,
        description="The leader steps down when it could not renew for this long.",
        json_schema_extra={"default": "10s"},
    )
    retry_period: Duration = Field(
        2.0,
        description="Between attempts to acquire or renew.",
        json_schema_extra={"default": "2s"},
    )
    shards: int = Field(
        0,
        ge=0,
        le=MAX_SHARDS,
        description="Above 0: repositories hash to this many shard Leases, spread over the "
        "replicas; 0: the leader reconciles every repository.",
    )

    def rules(self) -> list[Rule]:
        found: list[Rule] = []
        if self.enabled and not self.namespace:
            found.append(
                (
                    "namespace",
                    "is required",
                    "name the namespace of the Lease",
                    ("enabled", "namespace"),
                )
            )
        if not self.lease_duration > self.renew_deadline > self.retry_period:
            found.append(
                (
                    "",
                    "needs leaseDuration > renewDeadline > retryPeriod, else two reconcilers "
                    "could lead at once",
                    "keep the defaults 15s, 10s and 2s, or scale them together",
                    ("leaseDuration", "renewDeadline", "retryPeriod"),
                )
            )
        if self.shards and not self.enabled:
            found.append(
                (
                    "shards",
                    "shards need the Leases of leader election",
                    "set enabled: true (and the namespace of the Leases)",
                    ("enabled", "shards"),
                )
            )
        return found


class ReconcilerConfig(Strict):
    """The reconciler's config file. Paths are relative to the file; secrets are references."""

    api_version: Text | None = Field(None, description="Free-form; not read.")
    kind: Text | None = Field(None, description="Free-form; not read.")
    control_plane: OwnKubeconfig = Field(
        description="The reconciler's own identity on the Control Plane."
    )
    listen: Listen = Field(
        "127.0.0.1:8080",
        description="host:port of /healthz, /readyz, /metrics and the webhooks.",
    )
    poll_interval: Duration = Field(
        30.0,
        description="How often every repository is checked for new commits (webhooks are sooner).",
        json_schema_extra={"default": "30s"},
    )
    batch_window: Duration = Field(
        2.0,
        description="Status changes within this window become one commit.",
        json_schema_extra={"default": "2s"},
    )
    workers: int = Field(4, ge=1, le=64, description="Repositories reconciled at once.")
    work_dir: Text | None = Field(
        None, description="Where the clones live; ~/.cache/klutch-gitops/repos when unset."
    )
    bot: Bot = Field(
        default_factory=Bot,
        description="The reconciler's identity in status commits.",
        json_schema_extra={"default": {}},
    )
    binder_tokens: BinderTokens = Field(
        default_factory=BinderTokens,
        description="Renewal of the tokens in binder kubeconfig Secrets.",
        json_schema_extra={"default": {}},
    )
    leader_election: LeaderElection = Field(
        default_factory=LeaderElection,
        description="Several replicas: one leader, or shards.",
        json_schema_extra={"default": {}},
    )
    metrics_token: SecretSource | None = Field(
        None,
        description="A token that unlocks the names on /readyz and /metrics (Authorization: "
        "Bearer); a Secret needs its namespace.",
    )
    platform: Platform | None = Field(None, description="The platform team's repository.")
    repositories: list[Repository] = Field(
        default_factory=list,
        description="Static registrations; RepositoryBindings add more at run time.",
        json_schema_extra={"default": []},
    )

    def rules(self) -> list[Rule]:
        found: list[Rule] = []
        ref = self.metrics_token.secret_ref if self.metrics_token else None
        if ref is not None and not ref.namespace:
            found.append(
                (
                    "metricsToken.secretRef.namespace",
                    "is required",
                    "name the namespace of the Secret on the Control Plane (the reconciler's own)",
                    ("metricsToken",),
                )
            )
        names = Counter(r.name for r in self.repositories)
        found += [
            (
                "repositories",
                f"the name {name!r} is used more than once",
                "give every repository its own name",
                ("repositories",),
            )
            for name, count in sorted(names.items())
            if count > 1
        ]
        return found
