"""LocalUser: a LOGIN role for one database, with a generated password, and its credentials.

Privileges follow a9s's bindings: ``Owner`` (the default) makes the user a member of the
database's owner role and starts its sessions in that role (``ALTER ROLE … IN DATABASE … SET
role``), so it has the owner's rights (CONNECT, CREATE on schema public, every object) and what it
creates belongs to the owner role: every user of the database can use it, and it outlives the
user. ``CONNECT``, ``TEMPORARY`` and ``CREATE`` are granted on the database itself, for users that
need less. The password is generated once and kept in the connection Secret (a9s's keys); when
that Secret is lost, a new password is set and published. Deleting the user ends its sessions,
gives what it still owns to the owner role and drops it.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from psycopg import sql

from klutch_local.provider.api import (
    DATABASES,
    ReconcileError,
    at_provider,
    external_name,
    for_provider,
    identity,
    marker,
    owner_role,
    pg_identifier,
)
from klutch_local.provider.managed import Context, Details, Observation, resolve
from klutch_local.provider.server import Batch, Server

log = logging.getLogger(__name__)

KIND = "LocalUser"
OWNER = "Owner"
DATABASE_PRIVILEGES = ("CONNECT", "CREATE", "TEMPORARY")
DEFAULT_PRIVILEGES = (OWNER,)


@dataclass(frozen=True)
class Role:
    comment: str | None
    member_of_owner: bool
    session_role: str | None  # the ``role`` setting of its sessions in the database
    privileges: frozenset[str]  # granted on the database directly

    def held(self, database: str) -> frozenset[str]:
        """The privileges as the spec names them."""
        owner = self.member_of_owner and self.session_role == owner_role(database)
        return self.privileges | ({OWNER} if owner else set())


@dataclass(frozen=True)
class State:
    user: str
    database: str
    database_exists: bool
    owner_exists: bool
    role: Role | None


def desired_privileges(params: dict[str, Any]) -> frozenset[str]:
    return frozenset(params.get("privileges") or DEFAULT_PRIVILEGES)


def problem(state: State, wanted: frozenset[str], mr_name: str) -> str:
    """Why the user cannot be made as the spec says (empty when it can)."""
    if not state.database_exists:
        return (
            f"database {state.database!r} does not exist: create it with a LocalDatabase, or fix "
            "spec.forProvider.database (or databaseRef)"
        )
    if OWNER in wanted and not state.owner_exists:
        return (
            f"database {state.database!r} has no owner role {owner_role(state.database)!r} (a "
            "LocalDatabase makes one): use a database made by a LocalDatabase, or leave Owner "
            "out of spec.forProvider.privileges"
        )
    if state.role is not None and state.role.comment != marker(KIND, mr_name):
        return (
            f"role {state.user!r} exists and was not made for {KIND} {mr_name}: choose another "
            "name with the crossplane.io/external-name annotation"
        )
    return ""


def plan(state: State, wanted: frozenset[str], mr_name: str, password: str | None) -> list[Batch]:
    """Statements from the observed role to the wanted one. ``password`` is a SCRAM verifier
    (libpq's encryption, so the clear password never reaches the server), or None to keep it."""
    user, database = sql.Identifier(state.user), sql.Identifier(state.database)
    owner = sql.Identifier(owner_role(state.database))
    statements: list[sql.Composed] = []
    if state.role is None:
        statements += [
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(user, sql.Literal(password)),
            sql.SQL("COMMENT ON ROLE {} IS {}").format(user, sql.Literal(marker(KIND, mr_name))),
        ]
    elif password is not None:
        statements.append(
            sql.SQL("ALTER ROLE {} WITH LOGIN PASSWORD {}").format(user, sql.Literal(password))
        )
    role = state.role or Role(None, False, None, frozenset())
    if OWNER in wanted:
        if not role.member_of_owner:
            statements.append(sql.SQL("GRANT {} TO {}").format(owner, user))
        if role.session_role != owner_role(state.database):
            statements.append(
                sql.SQL("ALTER ROLE {} IN DATABASE {} SET role = {}").format(
                    user, database, sql.Literal(owner_role(state.database))
                )
            )
    else:
        if role.member_of_owner:
            statements.append(sql.SQL("REVOKE {} FROM {}").format(owner, user))
        if role.session_role is not None:
            statements.append(
                sql.SQL("ALTER ROLE {} IN DATABASE {} RESET role").format(user, database)
            )
    grant = sorted(wanted.intersection(DATABASE_PRIVILEGES) - role.privileges)
    revoke = sorted(role.privileges - wanted)
    for verb, privileges, preposition in (("GRANT", grant, "TO"), ("REVOKE", revoke, "FROM")):
        if privileges:
            statements.append(
                sql.SQL("{} {} ON DATABASE {} {} {}").format(
                    sql.SQL(verb),
                    sql.SQL(", ").join(sql.SQL(p) for p in privileges),
                    database,
                    sql.SQL(preposition),
                    user,
                )
            )
    return [tuple(statements)] if statements else []


def credentials(server: Server, user: str, password: str, database: str) -> Details:
    """The connection details under a9s's keys for a PostgreSQL binding."""
    uri = (
        f"postgresql://{quote(user, safe='')}:{quote(password, safe='')}@{server.host}:"
        f"{server.port}/{quote(database, safe='')}"
    )
    return {
        "host": server.host,
        "hosts": json.dumps([server.host]),
        "name": database,
        "password": password,
        "port": str(server.port),
        "uri": uri,
        "username": user,
    }


class LocalUser:
    """The External of LocalUser."""

    def observe(self, ctx: Context) -> Observation:
        state = self._inspect(ctx, resolve(ctx, "database", DATABASES))
        recorded = at_provider(ctx.mr).get("database")
        if recorded and recorded != state.database and state.role is not None:
            raise ReconcileError(
                f"the database of {KIND} {ctx.mr['metadata']['name']} cannot change (it is "
                f"{recorded!r}): create another {KIND} for {state.database!r}"
            )
        mr_name = identity(ctx.mr)
        wanted = desired_privileges(for_provider(ctx.mr))
        reason = problem(state, wanted, mr_name)
        if reason or state.role is None:
            return Observation(exists=state.role is not None, conflict=reason)
        password = ctx.connection_secret().get("password")
        return Observation(
            exists=True,
            up_to_date=password is not None and not plan(state, wanted, mr_name, None),
            at_provider={
                "database": state.database,
                "privileges": sorted(state.role.held(state.database)),
            },
            connection=credentials(ctx.server, state.user, password, state.database)
            if password
            else None,
        )

    def create(self, ctx: Context) -> Details | None:
        return self._converge(ctx, new_password=True)

    def update(self, ctx: Context, observation: Observation) -> Details | None:
        return self._converge(ctx, new_password=observation.connection is None)

    def _converge(self, ctx: Context, new_password: bool) -> Details | None:
        state = self._inspect(ctx, resolve(ctx, "database", DATABASES))
        mr_name = identity(ctx.mr)
        password = secrets.token_urlsafe(24) if new_password else None
        with ctx.server.connect() as connection:
            verifier = (
                connection.pgconn.encrypt_password(
                    password.encode(), state.user.encode(), b"scram-sha-256"
                ).decode()
                if password
                else None
            )
        ctx.server.execute(plan(state, desired_privileges(for_provider(ctx.mr)), mr_name, verifier))
        return credentials(ctx.server, state.user, password, state.database) if password else None

    def delete(self, ctx: Context) -> None:
        mr_name = identity(ctx.mr)
        try:
            database = resolve(ctx, "database", DATABASES)
        except ReconcileError:  # the LocalDatabase went first: what the user was made for
            database = at_provider(ctx.mr).get("database") or ""
        state = self._inspect(ctx, database)
        if state.role is None or state.role.comment != marker(KIND, mr_name):
            log.info("nothing of ours to drop", extra={"kind": KIND, "object": mr_name})
            return
        user = sql.Identifier(state.user)
        ctx.server.execute(
            [
                (sql.SQL("ALTER ROLE {} NOLOGIN").format(user),),
                (
                    sql.SQL(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = {}"
                    ).format(sql.Literal(state.user)),
                ),
            ]
        )
        if state.database_exists:
            cleanup: list[sql.Composed] = []
            if state.owner_exists:
                cleanup.append(
                    sql.SQL("REASSIGN OWNED BY {} TO {}").format(
                        user, sql.Identifier(owner_role(state.database))
                    )
                )
            cleanup.append(sql.SQL("DROP OWNED BY {}").format(user))
            ctx.server.execute([tuple(cleanup)], database=state.database)
        ctx.server.execute([(sql.SQL("DROP ROLE {}").format(user),)])

    @staticmethod
    def _inspect(ctx: Context, database: str) -> State:
        user = pg_identifier(external_name(ctx.mr), "user name")
        with ctx.server.connect() as connection:
            row = connection.execute(
                """
                SELECT d.oid IS NOT NULL, o.oid IS NOT NULL, r.oid IS NOT NULL,
                       shobj_description(r.oid, 'pg_authid'),
                       COALESCE(pg_has_role(r.oid, o.oid, 'MEMBER'), false),
                       (SELECT substr(c, 6) FROM pg_db_role_setting s, unnest(s.setconfig) c
                        WHERE s.setrole = r.oid AND s.setdatabase = d.oid AND c LIKE 'role=%%'),
                       ARRAY(SELECT a.privilege_type FROM aclexplode(d.datacl) a
                             WHERE a.grantee = r.oid)
                FROM (SELECT 1) one
                LEFT JOIN pg_database d ON d.datname = %(database)s
                LEFT JOIN pg_roles o ON o.rolname = %(owner)s
                LEFT JOIN pg_roles r ON r.rolname = %(user)s
                """,
                {"database": database, "owner": owner_role(database), "user": user},
            ).fetchone()
        assert row is not None  # one row, always
        database_exists, owner_exists, role_exists, comment, member, session_role, granted = row
        role = (
            Role(comment, member, session_role, frozenset(granted or ())) if role_exists else None
        )
        return State(user, database, database_exists, owner_exists, role)
