"""The reconciler's config file, parsed and validated into a Config.

Every problem in the file is collected and reported at once (``settings.FieldReader``), each
naming the field path and the fix, so one edit fixes them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from klutch_gitops.config import (
    LEASE_NAME,
    Bot,
    Config,
    LeaderElection,
    PlatformSpec,
    RepositorySpec,
    TokenRenewal,
)
from klutch_gitops.repository_config import URL_FIX, URL_PATTERN, read_repository
from klutch_gitops.settings import NAME_PATTERN, FieldReader, read_config_file

TOKEN_REQUEST_MINIMUM = 600.0  # seconds: the shortest token the TokenRequest API issues
MAX_SHARDS = 256  # every replica renews its shard Leases each retry period
CONFIG_FIELDS = {
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
}
LEADER_ELECTION_FIELDS = {
    "enabled",
    "namespace",
    "name",
    "leaseDuration",
    "renewDeadline",
    "retryPeriod",
    "shards",
}


def load_config(path: Path) -> Config:
    return parse_config(read_config_file(path), str(path), path.parent)


def parse_config(text: str, origin: str, base: Path) -> Config:
    """Parse and validate; raise one KlutchError listing every problem found."""
    reader = FieldReader(origin, base)
    data = reader.mapping(reader.parse(text), "", CONFIG_FIELDS)
    control_plane = reader.own_kubeconfig(data.get("controlPlane"), "the reconciler")
    repositories = read_repositories(reader, data.get("repositories") or [])
    platform = read_platform(reader, data.get("platform"))
    workers = data.get("workers", 4)
    if not isinstance(workers, int) or not 1 <= workers <= 64:
        reader.problem("workers", f"{workers!r} is not a number from 1 to 64", "set workers: 4")
        workers = 4
    bot = reader.mapping(data.get("bot"), "bot", {"name", "email"})
    work_dir = reader.string(data, "workDir", "")
    binder_tokens = read_token_renewal(reader, data.get("binderTokens"), "binderTokens")
    leader_election = read_leader_election(reader, data.get("leaderElection"), "leaderElection")
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
        repositories=repositories,
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


def read_repositories(reader: FieldReader, raw: Any) -> tuple[RepositorySpec, ...]:
    """``repositories``: the valid entries; every name once."""
    if not isinstance(raw, list):
        reader.problem("repositories", "must be a list", "write each repository as `- name: …`")
        raw = []
    repositories = []
    for index, entry in enumerate(raw):
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
    return tuple(repositories)


def read_platform(reader: FieldReader, data: Any) -> PlatformSpec | None:
    """``platform``: the platform team's repository, if any."""
    if data is None:
        return None
    raw = reader.mapping(
        data, "platform", {"url", "branch", "path", "credentials", "webhookSecret"}
    )
    url = reader.string(raw, "url", "platform", required=True, pattern=URL_PATTERN, fix=URL_FIX)
    if not url:
        return None
    return PlatformSpec(
        url=url,
        branch=reader.string(raw, "branch", "platform", default="main") or "main",
        path=reader.string(raw, "path", "platform", default=".") or ".",
        credentials=reader.credentials(raw.get("credentials"), "platform.credentials"),
        webhook_secret=reader.secret_ref(raw.get("webhookSecret"), "platform.webhookSecret"),
    )


def read_token_renewal(reader: FieldReader, data: Any, where: str) -> TokenRenewal:
    """``binderTokens``; a threshold not below the lifetime would renew without end."""
    data = reader.mapping(data, where, {"lifetime", "renewBefore"})
    lifetime = reader.duration(data, "lifetime", where)
    if lifetime is None:
        lifetime = TokenRenewal.lifetime
    elif lifetime < TOKEN_REQUEST_MINIMUM:
        reader.problem(
            f"{where}.lifetime",
            "is shorter than the TokenRequest API's minimum of 10m",
            "set a lifetime of 10m or more, e.g. 24h",
        )
    renew_before = reader.duration(data, "renewBefore", where)
    if renew_before is not None and not 0 < renew_before < lifetime:
        reader.problem(
            f"{where}.renewBefore",
            f"must be above 0 and below the lifetime ({lifetime:.0f}s), "
            "else every renewed token would be due at once",
            "set e.g. renewBefore: 8h for a 24h lifetime, or leave it out for a third",
        )
    return TokenRenewal(lifetime=lifetime, renew_before=renew_before)


def read_leader_election(reader: FieldReader, data: Any, where: str) -> LeaderElection:
    """``leaderElection``; the durations must leave the leader time to step down before a
    standby may take over: leaseDuration > renewDeadline > retryPeriod."""
    data = reader.mapping(data, where, LEADER_ELECTION_FIELDS)
    enabled = data.get("enabled", False)
    if not isinstance(enabled, bool):
        reader.problem(
            f"{where}.enabled", f"must be true or false, got {enabled!r}", "set enabled: true"
        )
        enabled = False
    fix = "use lowercase letters, digits and '-', at most 63"
    namespace = reader.string(
        data, "namespace", where, required=enabled, pattern=NAME_PATTERN, fix=fix
    )
    name = reader.string(data, "name", where, default=LEASE_NAME, pattern=NAME_PATTERN, fix=fix)
    lease_duration, renew_deadline, retry_period = _lease_timing(reader, data, where)
    return LeaderElection(
        enabled=enabled,
        namespace=namespace or "",
        name=name or LEASE_NAME,
        lease_duration=lease_duration,
        renew_deadline=renew_deadline,
        retry_period=retry_period,
        shards=_shards(reader, data, where, enabled),
    )


def _lease_timing(
    reader: FieldReader, data: Mapping[str, Any], where: str
) -> tuple[float, float, float]:
    """leaseDuration, renewDeadline and retryPeriod, defaults for those left out."""
    defaults = LeaderElection()
    lease_duration, renew_deadline, retry_period = (
        default if value is None else value
        for value, default in (
            (reader.duration(data, "leaseDuration", where), defaults.lease_duration),
            (reader.duration(data, "renewDeadline", where), defaults.renew_deadline),
            (reader.duration(data, "retryPeriod", where), defaults.retry_period),
        )
    )
    if not lease_duration > renew_deadline > retry_period > 0:
        reader.problem(
            where,
            "needs leaseDuration > renewDeadline > retryPeriod, else two reconcilers could "
            "lead at once",
            "keep the defaults 15s, 10s and 2s, or scale them together",
        )
    return lease_duration, renew_deadline, retry_period


def _shards(reader: FieldReader, data: Mapping[str, Any], where: str, enabled: bool) -> int:
    shards = data.get("shards", 0)
    if isinstance(shards, bool) or not isinstance(shards, int) or not 0 <= shards <= MAX_SHARDS:
        reader.problem(
            f"{where}.shards",
            f"{shards!r} is not a number from 0 to {MAX_SHARDS}",
            "set shards: 16 to spread repositories over the replicas, or 0 for one leader",
        )
        return 0
    if shards and not enabled:
        reader.problem(
            f"{where}.shards",
            "shards need the Leases of leader election",
            "set enabled: true (and the namespace of the Leases)",
        )
    return shards
