"""The server a ProviderConfig names, and the only code here that talks to it.

A ProviderConfig points at a Secret with Crossplane's connection keys (``endpoint``, ``port``,
``username``, ``password``, as provider-sql reads them) holding a superuser's login; backups go to
its ``spec.backupStore.path`` or, without one, to the directory the provider was started with.
A namespaced ProviderConfig (Crossplane 2) reads a Secret in its own namespace and has no store
of its own: a namespace cannot choose where on the provider's machine files are written.
"""

from __future__ import annotations

import base64
import binascii
import os
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import SECRETS
from klutch_local.provider.api import ReconcileError, provider_config_ref

SECRET_KEYS = ("endpoint", "port", "username", "password")
TOOL_TIMEOUT = 1800.0
CONNECT_TIMEOUT = 10
APPLICATION = "klutch-local-provider"

# Statements that run together in one transaction; a batch of one runs on its own, as CREATE and
# DROP DATABASE must.
Batch = Sequence[sql.Composed]


@dataclass(frozen=True)
class Server:
    host: str
    port: int
    username: str
    password: str
    backup_dir: Path | None
    bin_dir: Path

    def connect(self, database: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.username,
            password=self.password,
            dbname=database,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT,
            application_name=APPLICATION,
        )

    def execute(self, batches: Sequence[Batch], database: str = "postgres") -> None:
        if not batches:
            return
        with self.connect(database) as connection:
            for batch in batches:
                if len(batch) == 1:
                    connection.execute(batch[0])
                    continue
                with connection.transaction():
                    for statement in batch:
                        connection.execute(statement)

    def store(self, provider_config: str) -> Path:
        """The backup directory, made owner-only on first use; ``provider_config`` names the
        object (kind and name) for the error."""
        if self.backup_dir is None:
            raise ReconcileError(
                f"{provider_config} has no backup store: set its "
                "spec.backupStore.path, or start the provider with --backup-dir"
            )
        self.backup_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self.backup_dir

    def run(self, tool: str, args: list[str]) -> None:
        """pg_dump or pg_restore as the superuser; the password travels in the environment."""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PGPASSWORD": self.password,
            "PGCONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
            "PGAPPNAME": APPLICATION,
        }
        argv = [
            str(self.bin_dir / tool),
            f"--host={self.host}",
            f"--port={self.port}",
            f"--username={self.username}",
            "--no-password",
            *args,
        ]
        try:
            done = subprocess.run(
                argv, env=env, capture_output=True, text=True, timeout=TOOL_TIMEOUT, check=False
            )
        except subprocess.TimeoutExpired:
            raise ReconcileError(f"{tool} did not finish within {TOOL_TIMEOUT:.0f}s") from None
        if done.returncode != 0:
            raise ReconcileError(
                f"{tool} failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}"
            )


def secret_ref(provider_config: dict[str, Any]) -> tuple[str | None, str | None]:
    """The namespace and name of a ProviderConfig's Secret: a namespaced ProviderConfig's is in
    its own namespace, whatever the reference says."""
    spec = provider_config.get("spec") or {}
    ref = (spec.get("credentials") or {}).get("connectionSecretRef") or {}
    namespace = provider_config.get("metadata", {}).get("namespace") or ref.get("namespace")
    return namespace, ref.get("name")


def server_from(
    name: str,
    provider_config: dict[str, Any] | None,
    secret: dict[str, Any] | None,
    default_backup_dir: Path | None,
    bin_dir: Path,
    kind: str = "ProviderConfig",
) -> Server:
    """The server of ``kind`` ``name``, or an error saying what is missing."""
    if provider_config is None:
        raise ReconcileError(
            f"{kind} {name} not found: create it, with spec.credentials."
            f"connectionSecretRef naming a Secret with the keys {', '.join(SECRET_KEYS)}"
        )
    spec = provider_config.get("spec") or {}
    namespace, secret_name = secret_ref(provider_config)
    where = f"Secret {namespace}/{secret_name} of {kind} {name}"
    if secret is None:
        raise ReconcileError(f"{where} not found")
    data = secret.get("data") or {}
    missing = [key for key in SECRET_KEYS if not data.get(key)]
    if missing:
        raise ReconcileError(f"{where} lacks the key(s) {', '.join(missing)}")
    try:
        values = {key: base64.b64decode(data[key]).decode() for key in SECRET_KEYS}
        port = int(values["port"])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise ReconcileError(f"{where}: port must be a number, every key UTF-8") from None
    namespaced = bool(provider_config.get("metadata", {}).get("namespace"))
    store = None if namespaced else (spec.get("backupStore") or {}).get("path")
    return Server(
        host=values["endpoint"],
        port=port,
        username=values["username"],
        password=values["password"],
        backup_dir=Path(store) if store else default_backup_dir,
        bin_dir=bin_dir,
    )


class Connector:
    """Reads a managed resource's ProviderConfig and its Secret, fresh on every reconcile, so
    rotated credentials apply at once."""

    def __init__(self, kube: Kube, default_backup_dir: Path | None, bin_dir: Path) -> None:
        self.kube = kube
        self.default_backup_dir = default_backup_dir
        self.bin_dir = bin_dir

    def connect(self, mr: dict[str, Any]) -> Server:
        ref = provider_config_ref(mr)
        provider_config = self.kube.get(ref.resource, ref.namespace, ref.name)
        secret = None
        if provider_config is not None:
            namespace, name = secret_ref(provider_config)
            if name and namespace:
                secret = self.kube.get(SECRETS, namespace, name)
        label = f"{ref.namespace}/{ref.name}" if ref.namespace else ref.name
        return server_from(
            label,
            provider_config,
            secret,
            self.default_backup_dir,
            self.bin_dir,
            kind=ref.resource.kind,
        )
