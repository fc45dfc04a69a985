"""The local provider against a real PostgreSQL server and the real Control Plane.

The server comes from ``klutch_gitops.localstack.postgres`` (as the stack starts it), the provider
runs in this process, and everything is checked where it happens: on the server, with the
credentials the provider hands out, and in the objects' conditions. The command-line provider has
a module of its own: two providers on one Control Plane would act on the same objects.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from kubernetes import client

from klutch_gitops.kube import NAMESPACES, SECRETS, Kube, Resource
from klutch_gitops.local_provider.api import (
    BACKUPS,
    DATABASES,
    EXTERNAL_NAME,
    FINALIZER,
    PROVIDER_CONFIGS,
    RESTORES,
    USERS,
    conditions_of,
)
from klutch_gitops.local_provider.provider import LocalProvider, bootstrap
from klutch_gitops.localstack.postgres import PostgresInfo

from .gitops import eventually
from .pgserver import running_postgres

A9S_KEYS = ["host", "hosts", "name", "password", "port", "uri", "username"]


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresInfo]:
    with running_postgres(tmp_path_factory.mktemp("postgres")) as info:
        yield info


@pytest.fixture(scope="module")
def kube(clusters: dict[str, client.ApiClient]) -> Kube:
    return Kube(clusters["control-plane"])


@pytest.fixture(scope="module")
def provider(kube: Kube, postgres: PostgresInfo) -> Iterator[LocalProvider]:
    provider = LocalProvider(
        kube,
        backup_dir=Path(postgres.backup_dir),
        bin_dir=Path(postgres.bin_dir),
        poll_interval=2.0,  # drift is repaired within seconds, for the drift test
    ).start()
    eventually(provider.synced, "the provider's caches")
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def secrets_namespace(kube: Kube) -> Iterator[str]:
    name = f"t-local-provider-{uuid.uuid4().hex[:6]}"
    kube.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete(NAMESPACES, None, name)


@pytest.fixture(scope="module")
def provider_config(
    kube: Kube, postgres: PostgresInfo, provider: LocalProvider, secrets_namespace: str
) -> Iterator[str]:
    name = f"pc-{uuid.uuid4().hex[:6]}"
    bootstrap(
        kube,
        name,
        host=postgres.host,
        port=postgres.port,
        username=postgres.superuser,
        password=postgres.password,
        namespace=secrets_namespace,
    )
    yield name
    kube.delete(PROVIDER_CONFIGS, None, name)


def superuser(postgres: PostgresInfo, database: str = "postgres") -> psycopg.Connection[Any]:
    return psycopg.connect(
        host=postgres.host,
        port=postgres.port,
        user=postgres.superuser,
        password=postgres.password,
        dbname=database,
        autocommit=True,
    )


def query(postgres: PostgresInfo, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with superuser(postgres) as connection:
        return connection.execute(statement, params).fetchall()


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def create(kube: Kube, resource: Resource, name: str, spec: dict[str, Any]) -> None:
    kube.create(
        resource,
        {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": {"name": name},
            "spec": spec,
        },
    )


def condition(kube: Kube, resource: Resource, name: str, kind: str) -> dict[str, Any]:
    return conditions_of(kube.get(resource, None, name) or {}).get(kind, {})


def ready(kube: Kube, resource: Resource, name: str) -> dict[str, Any]:
    """Wait for Ready=True and Synced=True; the object."""

    def check() -> dict[str, Any] | None:
        obj = kube.get(resource, None, name) or {}
        found = conditions_of(obj)
        assert found.get("Synced", {}).get("status") != "False", found["Synced"]["message"]
        ok = found.get("Ready", {}).get("status") == found.get("Synced", {}).get("status") == "True"
        return obj if ok else None

    return eventually(check, f"{resource.kind} {name} Ready and Synced", timeout=60)


def gone(kube: Kube, resource: Resource, name: str) -> None:
    kube.delete(resource, None, name)
    eventually(lambda: kube.get(resource, None, name) is None, f"{resource.kind} {name} gone")


def database_exists(postgres: PostgresInfo, name: str) -> bool:
    return bool(query(postgres, "SELECT 1 FROM pg_database WHERE datname = %s", name))


def role_exists(postgres: PostgresInfo, name: str) -> bool:
    return bool(query(postgres, "SELECT 1 FROM pg_roles WHERE rolname = %s", name))


def test_database_user_backup_restore(
    kube: Kube,
    postgres: PostgresInfo,
    provider: LocalProvider,
    provider_config: str,
    secrets_namespace: str,
) -> None:
    pc = {"providerConfigRef": {"name": provider_config}}
    db, app, backup, restore = (unique(p) for p in ("orders", "app", "backup", "restore"))

    create(
        kube,
        DATABASES,
        db,
        {**pc, "forProvider": {"connectionLimit": 20, "statementTimeout": 30000}},
    )
    obj = ready(kube, DATABASES, db)
    assert obj["metadata"]["annotations"][EXTERNAL_NAME] == db
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert obj["status"]["atProvider"]["sizeBytes"] > 0
    assert obj["status"]["atProvider"]["settings"] == {"statement_timeout": "30000"}
    assert query(postgres, "SELECT datconnlimit FROM pg_database WHERE datname = %s", db) == [(20,)]

    create(
        kube,
        USERS,
        app,
        {
            **pc,
            "forProvider": {"databaseRef": {"name": db}},
            "writeConnectionSecretToRef": {"name": f"{app}-creds", "namespace": secrets_namespace},
        },
    )
    assert ready(kube, USERS, app)["status"]["atProvider"] == {
        "database": db,
        "privileges": ["Owner"],
    }
    secret = kube.get(SECRETS, secrets_namespace, f"{app}-creds")
    assert secret is not None
    assert sorted(secret["data"]) == A9S_KEYS
    creds = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert (creds["username"], creds["name"], creds["port"]) == (app, db, str(postgres.port))
    with psycopg.connect(creds["uri"], autocommit=True) as connection:
        assert connection.execute("SELECT current_user").fetchone() == (f"{db}_owner",)
        connection.execute("CREATE TABLE orders (id int PRIMARY KEY, item text)")
        connection.execute("INSERT INTO orders VALUES (1, 'tea'), (2, 'cake')")

    create(kube, BACKUPS, backup, {**pc, "forProvider": {"databaseRef": {"name": db}}})
    done = ready(kube, BACKUPS, backup)["status"]["atProvider"]
    assert done["database"] == db
    assert done["sizeBytes"] == Path(done["file"]).stat().st_size > 0
    assert Path(done["file"]).parent == Path(postgres.backup_dir)
    assert done["startedAt"] <= done["completedAt"]

    with psycopg.connect(creds["uri"], autocommit=True) as connection:
        connection.execute("DELETE FROM orders WHERE id = 1")
        connection.execute("INSERT INTO orders VALUES (3, 'scones')")

    create(
        kube,
        RESTORES,
        restore,
        {**pc, "forProvider": {"backupRef": {"name": backup}, "databaseRef": {"name": db}}},
    )
    restored = ready(kube, RESTORES, restore)["status"]["atProvider"]
    assert restored["restoredGeneration"] == 1
    assert restored["backupCompletedAt"] == done["completedAt"]
    with psycopg.connect(creds["uri"], autocommit=True) as connection:
        rows = connection.execute("SELECT id, item FROM orders ORDER BY id").fetchall()
        assert rows == [(1, "tea"), (2, "cake")]
        owner = connection.execute("SELECT tableowner FROM pg_tables WHERE tablename = 'orders'")
        assert owner.fetchone() == (f"{db}_owner",)
        connection.execute("INSERT INTO orders VALUES (4, 'jam')")

    # a resync (as after a restart) restores nothing again
    provider.reconcilers["LocalRestore"].reconcile(restore)
    with superuser(postgres, db) as connection:
        assert connection.execute("SELECT count(*) FROM orders").fetchone() == (3,)
    assert kube.get(RESTORES, None, restore)["status"]["atProvider"] == restored

    gone(kube, USERS, app)
    assert not role_exists(postgres, app)
    assert kube.get(SECRETS, secrets_namespace, f"{app}-creds") is None
    gone(kube, BACKUPS, backup)
    assert not Path(done["file"]).exists()
    gone(kube, RESTORES, restore)
    gone(kube, DATABASES, db)
    assert not database_exists(postgres, db)
    assert not role_exists(postgres, f"{db}_owner")


def test_spec_changes_reach_the_server(
    kube: Kube, postgres: PostgresInfo, provider_config: str
) -> None:
    db = unique("tuned")
    pc = {"providerConfigRef": {"name": provider_config}}
    create(kube, DATABASES, db, {**pc, "forProvider": {"statementTimeout": 1000, "workMem": "4MB"}})
    ready(kube, DATABASES, db)
    changed = {"connectionLimit": 3, "statementTimeout": None, "workMem": "8MB"}
    kube.patch(DATABASES, None, db, {"spec": {"forProvider": changed}})

    def applied() -> bool:
        (limit, settings) = query(
            postgres,
            "SELECT d.datconnlimit, s.setconfig FROM pg_database d LEFT JOIN pg_db_role_setting s"
            " ON s.setdatabase = d.oid AND s.setrole = 0 WHERE d.datname = %s",
            db,
        )[0]
        return limit == 3 and settings == ["work_mem=8MB"]

    eventually(applied, "the new connection limit and settings on the server")
    obj = ready(kube, DATABASES, db)
    assert obj["status"]["atProvider"]["settings"] == {"work_mem": "8MB"}
    assert {c["observedGeneration"] for c in obj["status"]["conditions"]} == {2}
    gone(kube, DATABASES, db)


def test_drift_on_the_server_is_repaired(
    kube: Kube, postgres: PostgresInfo, provider_config: str
) -> None:
    db = unique("drift")
    create(kube, DATABASES, db, {"providerConfigRef": {"name": provider_config}, "forProvider": {}})
    ready(kube, DATABASES, db)
    with superuser(postgres) as connection:
        connection.execute(psycopg.sql.SQL("DROP DATABASE {}").format(psycopg.sql.Identifier(db)))
    eventually(lambda: database_exists(postgres, db), "the dropped database back")
    gone(kube, DATABASES, db)


def test_orphan_keeps_the_database(
    kube: Kube, postgres: PostgresInfo, provider_config: str
) -> None:
    db = unique("kept")
    spec = {"providerConfigRef": {"name": provider_config}, "deletionPolicy": "Orphan"}
    create(kube, DATABASES, db, {**spec, "forProvider": {}})
    ready(kube, DATABASES, db)
    gone(kube, DATABASES, db)
    assert database_exists(postgres, db)
    assert role_exists(postgres, f"{db}_owner")
    # the same name adopts it again: the owner role's marker says whose it is
    create(kube, DATABASES, db, {"providerConfigRef": {"name": provider_config}, "forProvider": {}})
    ready(kube, DATABASES, db)
    gone(kube, DATABASES, db)
    assert not database_exists(postgres, db)


def test_an_unknown_database_is_reported_on_the_user(
    kube: Kube, postgres: PostgresInfo, provider_config: str, secrets_namespace: str
) -> None:
    name = unique("lost")
    create(
        kube,
        USERS,
        name,
        {
            "providerConfigRef": {"name": provider_config},
            "forProvider": {"database": "no-such-database"},
            "writeConnectionSecretToRef": {"name": name, "namespace": secrets_namespace},
        },
    )
    synced = eventually(
        lambda: (
            condition(kube, USERS, name, "Synced").get("status") == "False"
            and condition(kube, USERS, name, "Synced")
        ),
        "Synced=False",
    )
    assert synced["reason"] == "ReconcileError"
    assert synced["message"] == (
        "observe failed: database 'no-such-database' does not exist: create it with a "
        "LocalDatabase, or fix spec.forProvider.database (or databaseRef)"
    )
    assert not role_exists(postgres, name)
    gone(kube, USERS, name)


def test_someone_elses_database_is_never_touched(
    kube: Kube, postgres: PostgresInfo, provider_config: str
) -> None:
    name = unique("takeover")
    kube.create(
        DATABASES,
        {
            "apiVersion": DATABASES.api_version,
            "kind": DATABASES.kind,
            "metadata": {"name": name, "annotations": {EXTERNAL_NAME: "postgres"}},
            "spec": {"providerConfigRef": {"name": provider_config}, "forProvider": {}},
        },
    )
    synced = eventually(
        lambda: (
            condition(kube, DATABASES, name, "Synced").get("status") == "False"
            and condition(kube, DATABASES, name, "Synced")
        ),
        "Synced=False",
    )
    assert (
        f"database 'postgres' exists and was not made for LocalDatabase {name}"
        in (synced["message"])
    )
    gone(kube, DATABASES, name)
    assert database_exists(postgres, "postgres")


def test_a_missing_provider_config_is_reported(kube: Kube, provider: LocalProvider) -> None:
    name = unique("nowhere")
    create(kube, DATABASES, name, {"providerConfigRef": {"name": name}, "forProvider": {}})
    synced = eventually(
        lambda: (
            condition(kube, DATABASES, name, "Synced").get("status") == "False"
            and condition(kube, DATABASES, name, "Synced")
        ),
        "Synced=False",
    )
    assert synced["message"].startswith(f"connect failed: ProviderConfig {name} not found")
    # deleting needs the server too (as in Crossplane); orphaning is the way out
    kube.patch(DATABASES, None, name, {"spec": {"deletionPolicy": "Orphan"}})
    gone(kube, DATABASES, name)


def test_a_provider_config_in_use_stays_until_its_users_are_gone(
    kube: Kube, postgres: PostgresInfo, provider: LocalProvider, secrets_namespace: str
) -> None:
    pc, db = unique("pc"), unique("user-of-pc")
    bootstrap(
        kube,
        pc,
        host=postgres.host,
        port=postgres.port,
        username=postgres.superuser,
        password=postgres.password,
        namespace=secrets_namespace,
    )
    create(kube, DATABASES, db, {"providerConfigRef": {"name": pc}, "forProvider": {}})
    ready(kube, DATABASES, db)
    eventually(
        lambda: (kube.get(PROVIDER_CONFIGS, None, pc) or {}).get("status", {}).get("users") == 1,
        "status.users 1",
    )
    kube.delete(PROVIDER_CONFIGS, None, pc)
    assert kube.get(PROVIDER_CONFIGS, None, pc)["metadata"]["deletionTimestamp"]
    gone(kube, DATABASES, db)  # needs the ProviderConfig to drop the database
    assert not database_exists(postgres, db)
    eventually(lambda: kube.get(PROVIDER_CONFIGS, None, pc) is None, "the ProviderConfig gone")
