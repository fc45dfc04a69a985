"""The stack's PostgreSQL server: the superuser logs in over TCP with scram only, nobody else gets
in, and the stack's provider has a ProviderConfig for it."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client
from psycopg import sql

from klutch_gitops.dev.localstack.postgres import PostgresInfo
from klutch_gitops.dev.localstack.stack import LOCAL_PROVIDER_CONFIG, StackInfo
from klutch_gitops.kube.client import Kube
from klutch_local.provider.api import PROVIDER_CONFIGS

pytestmark = pytest.mark.crossplane


@pytest.fixture(scope="module")
def postgres(stack: StackInfo) -> PostgresInfo:
    assert stack.postgres is not None
    return stack.postgres


def connect(postgres: PostgresInfo, **overrides: Any) -> psycopg.Connection[Any]:
    """A TCP connection that insists on scram (libpq refuses any other method, trust included);
    an override of None leaves that parameter out."""
    params: dict[str, Any] = {
        "host": postgres.host,
        "port": postgres.port,
        "user": postgres.superuser,
        "password": postgres.password,
        "dbname": "postgres",
        "require_auth": "scram-sha-256",
        "connect_timeout": 10,
        "autocommit": True,
        **overrides,
    }
    return psycopg.connect(**{k: v for k, v in params.items() if v is not None})


def test_the_superuser_logs_in_over_tcp_with_scram(postgres: PostgresInfo) -> None:
    assert postgres.host == "127.0.0.1"
    with connect(postgres) as connection:
        row = connection.execute(
            "SELECT current_user, rolsuper, inet_server_addr()::text, "
            "starts_with(rolpassword, 'SCRAM-SHA-256$') FROM pg_authid WHERE rolname = current_user"
        ).fetchone()
        assert row == (postgres.superuser, True, "127.0.0.1/32", True)
        assert connection.execute("SHOW listen_addresses").fetchone() == ("127.0.0.1",)
        methods = connection.execute("SELECT DISTINCT auth_method FROM pg_hba_file_rules")
        assert methods.fetchall() == [("scram-sha-256",)]
    password_file = Path(postgres.password_file)
    assert password_file.read_text().strip() == postgres.password
    assert stat.S_IMODE(password_file.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"password": "wrong"}, "password authentication failed"),
        ({"user": "nobody"}, "password authentication failed"),
        # no password at all, nor a method demanded: the server asks for one all the same
        ({"password": None, "require_auth": None, "passfile": "/dev/null"}, "no password supplied"),
    ],
)
def test_anything_else_is_refused(
    postgres: PostgresInfo, overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(psycopg.OperationalError, match=message):
        connect(postgres, **overrides).close()


def test_a_tenant_cannot_enter_the_maintenance_databases(postgres: PostgresInfo) -> None:
    role, password = f"tenant_{uuid.uuid4().hex[:6]}", uuid.uuid4().hex
    with connect(postgres) as connection:
        connection.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(role), sql.Literal(password)
            )
        )
    try:
        for database in ("postgres", "template1"):
            with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
                connect(postgres, user=role, password=password, dbname=database).close()
    finally:
        with connect(postgres) as connection:
            connection.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_the_stacks_provider_config_names_the_server(
    clusters: dict[str, client.ApiClient],
) -> None:
    provider_config = Kube(clusters["control-plane"]).get(
        PROVIDER_CONFIGS, None, LOCAL_PROVIDER_CONFIG
    )
    assert provider_config is not None
    ref = provider_config["spec"]["credentials"]["connectionSecretRef"]
    assert ref == {"name": f"{LOCAL_PROVIDER_CONFIG}-postgresql", "namespace": "crossplane-system"}
