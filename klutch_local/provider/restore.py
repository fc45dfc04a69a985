"""LocalRestore: ``pg_restore --clean --if-exists`` of a LocalBackup's dump into a database.

A restore is an action, not a thing that exists on the server, so what "exists" means here is
"done for this spec": ``atProvider.restoredGeneration`` records the generation it ran for (and
``backupCompletedAt`` which dump it restored). A resync or a restarted provider restores nothing
again; editing the spec (a new generation) asks for another restore. It runs in one transaction
that stops at the first error, as the database's owner role, without the dump's owners and grants:
a dump of another database restores into this one with this database's ownership, or not at all.
"""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import make_conninfo

from klutch_local.provider.api import (
    BACKUPS,
    DATABASES,
    ReconcileError,
    at_provider,
    conditions_of,
    for_provider,
    now,
    owner_role,
    timestamp,
)
from klutch_local.provider.backup import backup_file
from klutch_local.provider.managed import Context, Details, Observation, resolve

KIND = "LocalRestore"


def restored(recorded: dict[str, Any], generation: int) -> bool:
    """Whether the restore already ran for this generation of the spec."""
    return recorded.get("restoredGeneration") == generation


class LocalRestore:
    """The External of LocalRestore."""

    def observe(self, ctx: Context) -> Observation:
        recorded = at_provider(ctx.mr)
        done = restored(recorded, ctx.mr["metadata"].get("generation", 0))
        return Observation(exists=done, at_provider=recorded)

    def create(self, ctx: Context) -> Details | None:
        backup = self._backup(ctx)
        database = resolve(ctx, "database", DATABASES)
        path = backup_file(ctx, backup)
        if not path.exists():
            raise ReconcileError(f"the dump of backup {backup!r} is not in the store ({path})")
        with ctx.server.connect() as connection:
            owner = connection.execute(
                "SELECT 1 FROM pg_roles WHERE rolname = %s", (owner_role(database),)
            ).fetchone()
        if owner is None:
            raise ReconcileError(
                f"database {database!r} has no owner role {owner_role(database)!r}: restore into "
                "a database made by a LocalDatabase"
            )
        started = now()
        progress = {"backup": backup, "database": database, "startedAt": started}
        ctx.report(progress)
        ctx.server.run(
            "pg_restore",
            [
                "--clean",
                "--if-exists",
                "--no-owner",
                "--no-privileges",
                f"--role={owner_role(database)}",
                "--single-transaction",
                "--exit-on-error",
                f"--dbname={make_conninfo(dbname=database)}",
                str(path),
            ],
        )
        ctx.report(
            {
                **progress,
                "backupCompletedAt": timestamp(path.stat().st_mtime),
                "completedAt": now(),
                "restoredGeneration": ctx.mr["metadata"].get("generation", 0),
            }
        )
        return None

    def update(self, ctx: Context, observation: Observation) -> Details | None:
        return None  # every spec change is a new generation: a new restore, through create

    def delete(self, ctx: Context) -> None:
        return None  # a restore cannot be taken back

    @staticmethod
    def _backup(ctx: Context) -> str:
        """The backup's external name; a referenced LocalBackup must have finished."""
        ref = (for_provider(ctx.mr).get("backupRef") or {}).get("name")
        if ref:
            backup = ctx.get(BACKUPS, ref)
            ready = conditions_of(backup or {}).get("Ready", {}).get("status") == "True"
            if backup is not None and not ready:
                raise ReconcileError(
                    f"LocalBackup {ref} is not Ready yet: its dump is not complete"
                )
        return resolve(ctx, "backup", BACKUPS)
