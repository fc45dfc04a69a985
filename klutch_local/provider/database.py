"""LocalDatabase: a database owned by a NOLOGIN role ``<name>_owner``, which its users act as.

The owner role carries the provider's marker comment, and it is what makes a database this
resource's own: a database someone else made (``postgres`` included) is never altered or dropped.
``connectionLimit`` and the knobs of Klutch's PostgreSQL parameters that work per database
(``ALTER DATABASE … SET``) are kept as the spec says; settings someone else set are left alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from klutch_local.provider.api import (
    OWNER_SUFFIX,
    external_name,
    for_provider,
    identity,
    marker,
    owner_role,
    pg_identifier,
)
from klutch_local.provider.managed import Context, Details, Observation
from klutch_local.provider.server import Batch

log = logging.getLogger(__name__)

KIND = "LocalDatabase"
# forProvider field -> the setting it becomes; the values are Klutch's parameters' (ms, kB, "4MB")
KNOBS = {
    "statementTimeout": "statement_timeout",
    "tempFileLimit": "temp_file_limit",
    "workMem": "work_mem",
    "idleInTransactionSessionTimeout": "idle_in_transaction_session_timeout",
}
NO_LIMIT = -1


@dataclass(frozen=True)
class Role:
    name: str
    comment: str | None


@dataclass(frozen=True)
class Database:
    owner: Role
    connection_limit: int
    settings: dict[str, str]
    size_bytes: int


def desired_settings(params: dict[str, Any]) -> dict[str, str]:
    return {setting: str(params[field]) for field, setting in KNOBS.items() if field in params}


def parse_settings(setconfig: list[str] | None) -> dict[str, str]:
    """``pg_db_role_setting.setconfig`` (``["name=value", …]``) as a mapping."""
    return dict(item.split("=", 1) for item in setconfig or [] if "=" in item)


def conflict(name: str, mr_name: str, role: Role | None, database: Database | None) -> str:
    """Why this resource must not touch ``name`` (empty when it may)."""
    mine = marker(KIND, mr_name)
    owner = owner_role(name)
    if database is not None and (database.owner.name != owner or database.owner.comment != mine):
        return (
            f"database {name!r} exists and was not made for {KIND} {mr_name} (its owner is "
            f"{database.owner.name!r}): choose another name with the crossplane.io/external-name "
            "annotation"
        )
    if database is None and role is not None and role.comment != mine:
        return (
            f"role {owner!r} exists and was not made for {KIND} {mr_name}: choose another "
            "database name with the crossplane.io/external-name annotation"
        )
    return ""


def create_plan(name: str, mr_name: str, params: dict[str, Any], role: Role | None) -> list[Batch]:
    """The owner role (unless a crash left it behind), the database, closed to everyone else."""
    owner = sql.Identifier(owner_role(name))
    database = sql.Identifier(name)
    plan: list[Batch] = []
    if role is None:
        plan.append(
            (
                sql.SQL("CREATE ROLE {} NOLOGIN").format(owner),
                sql.SQL("COMMENT ON ROLE {} IS {}").format(
                    owner, sql.Literal(marker(KIND, mr_name))
                ),
            )
        )
    limit = int(params.get("connectionLimit", NO_LIMIT))
    plan.append(
        (
            sql.SQL("CREATE DATABASE {} OWNER {} CONNECTION LIMIT {}").format(
                database, owner, sql.Literal(limit)
            ),
        )
    )
    plan.append((sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(database),))
    return plan + settings_plan(name, desired_settings(params), {})


def update_plan(name: str, params: dict[str, Any], database: Database) -> list[Batch]:
    plan: list[Batch] = []
    limit = int(params.get("connectionLimit", NO_LIMIT))
    if database.connection_limit != limit:
        plan.append(
            (
                sql.SQL("ALTER DATABASE {} WITH CONNECTION LIMIT {}").format(
                    sql.Identifier(name), sql.Literal(limit)
                ),
            )
        )
    return plan + settings_plan(name, desired_settings(params), database.settings)


def settings_plan(name: str, desired: dict[str, str], observed: dict[str, str]) -> list[Batch]:
    """SET what differs, RESET the knobs the spec dropped; other settings are not ours."""
    database = sql.Identifier(name)
    statements: list[sql.Composed] = [
        sql.SQL("ALTER DATABASE {} SET {} = {}").format(
            database, sql.Identifier(setting), sql.Literal(value)
        )
        for setting, value in sorted(desired.items())
        if observed.get(setting) != value
    ]
    statements += [
        sql.SQL("ALTER DATABASE {} RESET {}").format(database, sql.Identifier(setting))
        for setting in sorted(set(KNOBS.values()) - desired.keys())
        if setting in observed
    ]
    return [tuple(statements)] if statements else []


def at_provider_of(database: Database) -> dict[str, Any]:
    return {
        "owner": database.owner.name,
        "connectionLimit": database.connection_limit,
        "settings": database.settings,
        "sizeBytes": database.size_bytes,
    }


class LocalDatabase:
    """The External of LocalDatabase."""

    def observe(self, ctx: Context) -> Observation:
        name, role, database = self._inspect(ctx)
        mr_name = identity(ctx.mr)
        problem = conflict(name, mr_name, role, database)
        if database is None or problem:
            return Observation(exists=database is not None, conflict=problem)
        plan = update_plan(name, for_provider(ctx.mr), database)
        return Observation(exists=True, up_to_date=not plan, at_provider=at_provider_of(database))

    def create(self, ctx: Context) -> Details | None:
        name, role, _ = self._inspect(ctx)
        ctx.server.execute(create_plan(name, identity(ctx.mr), for_provider(ctx.mr), role))
        return None

    def update(self, ctx: Context, observation: Observation) -> Details | None:
        name, _, database = self._inspect(ctx)
        if database is not None:
            ctx.server.execute(update_plan(name, for_provider(ctx.mr), database))
        return None

    def delete(self, ctx: Context) -> None:
        name, role, database = self._inspect(ctx)
        mr_name = identity(ctx.mr)
        if role is None or conflict(name, mr_name, role, database):
            log.info(
                "nothing of ours to drop", extra={"kind": KIND, "object": mr_name, "database": name}
            )
            return
        plan: list[Batch] = []
        if database is not None:
            plan.append((sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)),))
        plan.append((sql.SQL("DROP ROLE {}").format(sql.Identifier(role.name)),))
        ctx.server.execute(plan)

    @staticmethod
    def _inspect(ctx: Context) -> tuple[str, Role | None, Database | None]:
        """The database's name, its owner role as this provider names it, and the database."""
        name = pg_identifier(external_name(ctx.mr), "database name", spare=len(OWNER_SUFFIX))
        with ctx.server.connect() as connection:
            row = connection.execute(
                "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s",
                (owner_role(name),),
            ).fetchone()
            role = Role(owner_role(name), row[0]) if row else None
            row = connection.execute(
                """
                SELECT r.rolname, shobj_description(r.oid, 'pg_authid'), d.datconnlimit,
                       s.setconfig, pg_database_size(d.oid)
                FROM pg_database d
                JOIN pg_roles r ON r.oid = d.datdba
                LEFT JOIN pg_db_role_setting s ON s.setdatabase = d.oid AND s.setrole = 0
                WHERE d.datname = %s
                """,
                (name,),
            ).fetchone()
        if row is None:
            return name, role, None
        owner, comment, limit, setconfig, size = row
        return name, role, Database(Role(owner, comment), limit, parse_settings(setconfig), size)
