"""The local backend: a PostgreSQL server and the provider that composes databases on it (it
installs its CRDs and the ProviderConfig the local-* Compositions name)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.dev.localstack import postgres
from klutch_gitops.dev.localstack.launcher import Launcher
from klutch_gitops.dev.localstack.processes import Process, free_port


@dataclass(frozen=True)
class LocalBackend:
    postgres: postgres.PostgresInfo
    provider: Process
    provider_health_port: int


def start_local_backend(
    launcher: Launcher, directory: Path, kubeconfig: str, provider_config: str
) -> LocalBackend:
    """The server, then the provider, not awaited. Spawned after the server, so the
    reverse-order stop ends the provider first."""
    pg = postgres.start_postgres(directory, launcher.spawn)
    health = free_port()
    provider = launcher.spawn(
        "local-provider",
        [
            sys.executable,
            "-m",
            "klutch_gitops.cli",
            "local-provider",
            f"--kubeconfig={kubeconfig}",
            f"--postgres-host={pg.host}",
            f"--postgres-port={pg.port}",
            f"--postgres-user={pg.superuser}",
            f"--postgres-password-file={pg.password_file}",
            f"--backup-dir={pg.backup_dir}",
            f"--pg-bin-dir={pg.bin_dir}",
            f"--provider-config={provider_config}",
            f"--health-port={health}",
            "--poll-interval=10",  # drift on a local server is repaired within seconds
        ],
    )
    return LocalBackend(pg, provider, health)
