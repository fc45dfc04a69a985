"""LocalBackup: one ``pg_dump -Fc`` of a database into the backup store, taken once.

The dump is written beside its final name and renamed when complete, so a file under the final
name is always a whole dump (a provider killed mid-dump starts over). The file is the external
resource: its modification time is the backup's ``completedAt``, which a LocalRestore records.
A dump that disappears from the store is taken again, as Crossplane recreates what vanished.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from psycopg.conninfo import make_conninfo

from klutch_local.provider.api import (
    DATABASES,
    ReconcileError,
    at_provider,
    external_name,
    now,
    provider_config_ref,
    timestamp,
)
from klutch_local.provider.managed import Context, Details, Observation, resolve

KIND = "LocalBackup"
SUFFIX = ".dump"
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}")


def dump_file(store: Path, name: str) -> Path:
    """Where the dump of the backup with external name ``name`` lives, inside ``store`` only."""
    if not FILE_NAME.fullmatch(name) or ".." in name:
        raise ReconcileError(
            f"{name!r} cannot name a dump file (letters, digits, '.', '_', '-', no '..'): set "
            "another crossplane.io/external-name annotation"
        )
    return store / f"{name}{SUFFIX}"


def backup_file(ctx: Context, name: str) -> Path:
    """A namespaced backup's dump lives in a directory of its namespace: two namespaces may
    name their backups alike."""
    store = ctx.server.store(str(provider_config_ref(ctx.mr)))
    namespace = ctx.mr["metadata"].get("namespace")
    return dump_file(store / namespace if namespace else store, name)


class LocalBackup:
    """The External of LocalBackup."""

    def observe(self, ctx: Context) -> Observation:
        path = backup_file(ctx, external_name(ctx.mr))
        recorded = at_provider(ctx.mr)
        if not path.exists():
            return Observation(exists=False)
        stat = path.stat()
        return Observation(
            exists=True,
            at_provider={
                "database": recorded.get("database", ""),
                "file": str(path),
                "sizeBytes": stat.st_size,
                "startedAt": recorded.get("startedAt", ""),
                "completedAt": timestamp(stat.st_mtime),
            },
        )

    def create(self, ctx: Context) -> Details | None:
        database = resolve(ctx, "database", DATABASES)
        path = backup_file(ctx, external_name(ctx.mr))
        ctx.report({"database": database, "startedAt": now()})
        partial = path.with_name(f".{path.name}.partial")
        path.parent.mkdir(exist_ok=True, mode=0o700)
        try:
            ctx.server.run(
                "pg_dump",
                [
                    "--format=custom",
                    f"--file={partial}",
                    f"--dbname={make_conninfo(dbname=database)}",
                ],
            )
            os.replace(partial, path)
        finally:
            partial.unlink(missing_ok=True)
        return None

    def update(self, ctx: Context, observation: Observation) -> Details | None:
        return None  # a backup is taken once; nothing about it changes

    def delete(self, ctx: Context) -> None:
        backup_file(ctx, external_name(ctx.mr)).unlink(missing_ok=True)
