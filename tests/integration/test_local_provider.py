"""The stack's local provider against the stack's PostgreSQL server and the real Control Plane.

Nothing here starts a server or a provider of its own: two providers would act on the same
objects. The tests name the stack's ProviderConfig (``local-postgresql``) and make uniquely named
objects of their own, and check everything where it happens: on the server, with the credentials
the provider hands out, and in the objects' conditions.
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

from klutch_gitops.dev.localstack.postgres import PostgresInfo
from klutch_gitops.dev.localstack.stack import LOCAL_PROVIDER_CONFIG, StackInfo
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from klutch_local.provider.api import (
    BACKUPS,
    DATABASES,
    EXTERNAL_NAME,
    FINALIZER,
    PROVIDER_CONFIGS,
    RESTORES,
    USERS,
    conditions_of,
)
from klutch_local.provider.provider import POLL_INTERVAL, bootstrap
from tests.kit.wait import eventually

pytestmark = pytest.mark.crossplane

A9S_KEYS = ["host", "hosts", "name", "password", "port", "uri", "username"]
KINDS = (RESTORES, BACKUPS, USERS, DATABASES)  # dependents first
TEST_LABEL = "klutch-gitops/test"
LABEL_VALUE = f"local-provider-{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def postgres(stack: StackInfo) -> PostgresInfo:
    assert stack.postgres is not None, "the stack runs PostgreSQL"
    return stack.postgres


@pytest.fixture(scope="module")
def kube(clusters: dict[str, client.ApiClient]) -> Iterator[Kube]:
    """The Control Plane; at the end, whatever a failed test left behind is deleted."""
    kube = Kube(clusters["control-plane"])
    assert kube.get(PROVIDER_CONFIGS, None, LOCAL_PROVIDER_CONFIG) is not None
    yield kube
    for resource in KINDS:
        for obj in kube.list(resource, label_selector=f"{TEST_LABEL}={LABEL_VALUE}")[0]:
            kube.delete(resource, None, obj["metadata"]["name"])


@pytest.fixture(scope="module")
def secrets_namespace(kube: Kube) -> Iterator[str]:
    name = f"t-local-provider-{uuid.uuid4().hex[:6]}"
    kube.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete(NAMESPACES, None, name)


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


def create(
    kube: Kube,
    resource: Resource,
    name: str,
    spec: dict[str, Any],
    annotations: dict[str, str] | None = None,
) -> None:
    """A managed resource of this module (labelled, so the module's teardown finds it)."""
    metadata: dict[str, Any] = {"name": name, "labels": {TEST_LABEL: LABEL_VALUE}}
    if annotations:
        metadata["annotations"] = annotations
    kube.create(
        resource,
        {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": metadata,
            "spec": {"providerConfigRef": {"name": LOCAL_PROVIDER_CONFIG}, **spec},
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


def not_synced(kube: Kube, resource: Resource, name: str) -> dict[str, Any]:
    """Wait for Synced=False; the condition."""
    return eventually(
        lambda: (
            condition(kube, resource, name, "Synced").get("status") == "False"
            and condition(kube, resource, name, "Synced")
        ),
        f"{resource.kind} {name} Synced=False",
    )


def gone(kube: Kube, resource: Resource, name: str) -> None:
    kube.delete(resource, None, name)
    eventually(lambda: kube.get(resource, None, name) is None, f"{resource.kind} {name} gone")


def resync(kube: Kube, resource: Resource, name: str) -> None:
    """Have the stack's provider reconcile ``name`` once more, and return once it has.

    Removing the external-name annotation is a change its watch acts on, and the reconcile puts
    the annotation back first thing. The second time it is back, the reconcile the first removal
    started has finished: one object is never reconciled twice at once.
    """

    def annotated() -> bool:
        obj = kube.get(resource, None, name) or {"metadata": {}}
        return EXTERNAL_NAME in (obj["metadata"].get("annotations") or {})

    for _ in range(2):
        kube.patch(resource, None, name, {"metadata": {"annotations": {EXTERNAL_NAME: None}}})
        eventually(annotated, f"the provider to reconcile {resource.kind} {name}")


def database_exists(postgres: PostgresInfo, name: str) -> bool:
    return bool(query(postgres, "SELECT 1 FROM pg_database WHERE datname = %s", name))


def role_exists(postgres: PostgresInfo, name: str) -> bool:
    return bool(query(postgres, "SELECT 1 FROM pg_roles WHERE rolname = %s", name))


def test_database_user_backup_restore(
    kube: Kube, postgres: PostgresInfo, secrets_namespace: str
) -> None:
    db, app, backup, restore = (unique(p) for p in ("orders", "app", "backup", "restore"))

    create(kube, DATABASES, db, {"forProvider": {"connectionLimit": 20, "statementTimeout": 30000}})
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

    create(kube, BACKUPS, backup, {"forProvider": {"databaseRef": {"name": db}}})
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
        {"forProvider": {"backupRef": {"name": backup}, "databaseRef": {"name": db}}},
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
    resync(kube, RESTORES, restore)
    with superuser(postgres, db) as connection:
        assert connection.execute("SELECT count(*) FROM orders").fetchone() == (3,)
    after = kube.get(RESTORES, None, restore)
    assert after["status"]["atProvider"] == restored
    assert condition(kube, RESTORES, restore, "Synced")["status"] == "True"

    gone(kube, USERS, app)
    assert not role_exists(postgres, app)
    assert kube.get(SECRETS, secrets_namespace, f"{app}-creds") is None
    gone(kube, BACKUPS, backup)
    assert not Path(done["file"]).exists()
    gone(kube, RESTORES, restore)
    gone(kube, DATABASES, db)
    assert not database_exists(postgres, db)
    assert not role_exists(postgres, f"{db}_owner")


def test_spec_changes_reach_the_server(kube: Kube, postgres: PostgresInfo) -> None:
    db = unique("tuned")
    create(kube, DATABASES, db, {"forProvider": {"statementTimeout": 1000, "workMem": "4MB"}})
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

    def reported() -> dict[str, Any] | None:
        """The provider writes the status after it changed the server: wait for that write."""
        obj = ready(kube, DATABASES, db)
        generations = {c["observedGeneration"] for c in obj["status"]["conditions"]}
        return obj if generations == {2} else None

    obj = eventually(reported, "the status of generation 2")
    assert obj["status"]["atProvider"]["settings"] == {"work_mem": "8MB"}
    gone(kube, DATABASES, db)


def test_drift_on_the_server_is_repaired(kube: Kube, postgres: PostgresInfo) -> None:
    """Nobody touches the object: the stack's provider finds the drift on its own poll."""
    db = unique("drift")
    create(kube, DATABASES, db, {"forProvider": {}})
    ready(kube, DATABASES, db)
    with superuser(postgres) as connection:
        connection.execute(psycopg.sql.SQL("DROP DATABASE {}").format(psycopg.sql.Identifier(db)))
    eventually(
        lambda: database_exists(postgres, db),
        "the dropped database back at the provider's next poll",
        timeout=POLL_INTERVAL + 60,
    )
    gone(kube, DATABASES, db)


def test_orphan_keeps_the_database(kube: Kube, postgres: PostgresInfo) -> None:
    db = unique("kept")
    create(kube, DATABASES, db, {"deletionPolicy": "Orphan", "forProvider": {}})
    ready(kube, DATABASES, db)
    gone(kube, DATABASES, db)
    assert database_exists(postgres, db)
    assert role_exists(postgres, f"{db}_owner")
    # the same name adopts it again: the owner role's marker says whose it is
    create(kube, DATABASES, db, {"forProvider": {}})
    ready(kube, DATABASES, db)
    gone(kube, DATABASES, db)
    assert not database_exists(postgres, db)


def test_an_unknown_database_is_reported_on_the_user(
    kube: Kube, postgres: PostgresInfo, secrets_namespace: str
) -> None:
    name = unique("lost")
    create(
        kube,
        USERS,
        name,
        {
            "forProvider": {"database": "no-such-database"},
            "writeConnectionSecretToRef": {"name": name, "namespace": secrets_namespace},
        },
    )
    synced = not_synced(kube, USERS, name)
    assert synced["reason"] == "ReconcileError"
    assert synced["message"] == (
        "observe failed: database 'no-such-database' does not exist: create it with a "
        "LocalDatabase, or fix spec.forProvider.database (or databaseRef)"
    )
    assert not role_exists(postgres, name)
    gone(kube, USERS, name)


def test_someone_elses_database_is_never_touched(kube: Kube, postgres: PostgresInfo) -> None:
    name = unique("takeover")
    create(kube, DATABASES, name, {"forProvider": {}}, annotations={EXTERNAL_NAME: "postgres"})
    synced = not_synced(kube, DATABASES, name)
    assert (
        f"database 'postgres' exists and was not made for LocalDatabase {name}" in synced["message"]
    )
    gone(kube, DATABASES, name)
    assert database_exists(postgres, "postgres")


def test_a_missing_provider_config_is_reported(kube: Kube) -> None:
    name = unique("nowhere")
    create(kube, DATABASES, name, {"providerConfigRef": {"name": name}, "forProvider": {}})
    synced = not_synced(kube, DATABASES, name)
    assert synced["message"].startswith(f"connect failed: ProviderConfig {name} not found")
    # deleting needs the server too (as in Crossplane); orphaning is the way out
    kube.patch(DATABASES, None, name, {"spec": {"deletionPolicy": "Orphan"}})
    gone(kube, DATABASES, name)


def test_a_provider_config_in_use_stays_until_its_users_are_gone(
    kube: Kube, postgres: PostgresInfo, secrets_namespace: str
) -> None:
    """A ProviderConfig of the test's own, for the stack's server, served by the stack's
    provider like its own."""
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
    try:
        create(kube, DATABASES, db, {"providerConfigRef": {"name": pc}, "forProvider": {}})
        ready(kube, DATABASES, db)
        eventually(
            lambda: (
                (kube.get(PROVIDER_CONFIGS, None, pc) or {}).get("status", {}).get("users") == 1
            ),
            "status.users 1",
        )
        kube.delete(PROVIDER_CONFIGS, None, pc)
        assert kube.get(PROVIDER_CONFIGS, None, pc)["metadata"]["deletionTimestamp"]
        gone(kube, DATABASES, db)  # needs the ProviderConfig to drop the database
        assert not database_exists(postgres, db)
        eventually(lambda: kube.get(PROVIDER_CONFIGS, None, pc) is None, "the ProviderConfig gone")
    finally:
        kube.delete(DATABASES, None, db)
        kube.delete(PROVIDER_CONFIGS, None, pc)
