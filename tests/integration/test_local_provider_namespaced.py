"""The stack's local provider serving Crossplane 2's namespaced managed resources, against the
stack's PostgreSQL server and the real Control Plane.

The fields are crossplane/crossplane apis/v2 core/v2/resource_namespace.go's: ``providerConfigRef
{kind, name}`` (a ClusterProviderConfig, or a ProviderConfig in the resource's namespace),
``writeConnectionSecretToRef {name}`` (in the resource's namespace), ``managementPolicies``. As in
test_local_provider.py nothing here starts a provider: the stack's acts on these objects; each
test works in namespaces of its own, deleted at the end.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
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
    CLUSTER_PROVIDER_CONFIGS,
    DATABASES,
    EXTERNAL_NAME,
    FINALIZER,
    IN_USE_FINALIZER,
    NS_PROVIDER_CONFIGS,
    RESTORES,
    USERS,
    conditions_of,
    namespaced,
)
from tests.kit.wait import eventually

pytestmark = pytest.mark.crossplane

DB, USER, BACKUP, RESTORE = (namespaced(r) for r in (DATABASES, USERS, BACKUPS, RESTORES))
A9S_KEYS = ["host", "hosts", "name", "password", "port", "uri", "username"]
CLUSTER_CONFIG = {"kind": "ClusterProviderConfig", "name": LOCAL_PROVIDER_CONFIG}


@pytest.fixture(scope="module")
def postgres(stack: StackInfo) -> PostgresInfo:
    assert stack.postgres is not None, "the stack runs PostgreSQL"
    return stack.postgres


@pytest.fixture(scope="module")
def kube(clusters: dict[str, client.ApiClient]) -> Kube:
    kube = Kube(clusters["control-plane"])
    assert kube.get(CLUSTER_PROVIDER_CONFIGS, None, LOCAL_PROVIDER_CONFIG) is not None
    return kube


@pytest.fixture
def new_namespace(kube: Kube) -> Iterator[Callable[[], str]]:
    """Namespaces of this test; deleting them deletes what a failed test left in them (the
    provider's finalizers drop what is on the server first)."""
    made: list[str] = []

    def make() -> str:
        name = f"t-ns-provider-{uuid.uuid4().hex[:6]}"
        kube.apply(
            NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
        made.append(name)
        return name

    yield make
    for name in made:
        kube.delete(NAMESPACES, None, name)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def create(
    kube: Kube,
    resource: Resource,
    namespace: str,
    name: str,
    spec: dict[str, Any],
    annotations: dict[str, str] | None = None,
) -> None:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if annotations:
        metadata["annotations"] = annotations
    kube.create(
        resource,
        {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "metadata": metadata,
            "spec": {"providerConfigRef": CLUSTER_CONFIG, **spec},
        },
    )


def ready(kube: Kube, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
    """Wait for Ready=True and Synced=True; the object."""

    def check() -> dict[str, Any] | None:
        obj = kube.get(resource, namespace, name) or {}
        found = conditions_of(obj)
        assert found.get("Synced", {}).get("status") != "False", found["Synced"]["message"]
        ok = found.get("Ready", {}).get("status") == found.get("Synced", {}).get("status") == "True"
        return obj if ok else None

    return eventually(check, f"{resource.kind} {namespace}/{name} Ready and Synced", timeout=60)


def not_synced(kube: Kube, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        synced = conditions_of(kube.get(resource, namespace, name) or {}).get("Synced", {})
        return synced if synced.get("status") == "False" else None

    return eventually(check, f"{resource.kind} {namespace}/{name} Synced=False")


def gone(kube: Kube, resource: Resource, namespace: str, name: str) -> None:
    kube.delete(resource, namespace, name)
    eventually(
        lambda: kube.get(resource, namespace, name) is None,
        f"{resource.kind} {namespace}/{name} gone",
    )


def query(postgres: PostgresInfo, statement: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(
        host=postgres.host,
        port=postgres.port,
        user=postgres.superuser,
        password=postgres.password,
        dbname="postgres",
        autocommit=True,
    ) as connection:
        return connection.execute(statement, params).fetchall()


def database_exists(postgres: PostgresInfo, name: str) -> bool:
    return bool(query(postgres, "SELECT 1 FROM pg_database WHERE datname = %s", name))


def test_namespaced_database_user_backup_restore(
    kube: Kube, postgres: PostgresInfo, new_namespace: Callable[[], str]
) -> None:
    ns = new_namespace()
    db, app, backup, restore = (unique(p) for p in ("orders", "app", "backup", "restore"))
    create(kube, DB, ns, db, {"forProvider": {"connectionLimit": 7}})
    obj = ready(kube, DB, ns, db)
    assert obj["spec"]["managementPolicies"] == ["*"]  # the CRD's default, as Crossplane 2's
    assert FINALIZER in obj["metadata"]["finalizers"]
    assert obj["metadata"]["annotations"][EXTERNAL_NAME] == db
    assert query(postgres, "SELECT datconnlimit FROM pg_database WHERE datname = %s", db) == [(7,)]
    marker = query(
        postgres,
        "SELECT shobj_description(oid, 'pg_authid') FROM pg_roles WHERE rolname = %s",
        f"{db}_owner",
    )
    assert marker == [(f"managed by klutch-gitops local-provider: LocalDatabase/{ns}/{db}",)]

    create(
        kube,
        USER,
        ns,
        app,
        {
            "forProvider": {"databaseRef": {"name": db}},
            "writeConnectionSecretToRef": {"name": f"{app}-creds"},
        },
    )
    assert ready(kube, USER, ns, app)["status"]["atProvider"]["database"] == db
    secret = kube.get(SECRETS, ns, f"{app}-creds")  # in the resource's own namespace
    assert secret is not None
    assert sorted(secret["data"]) == A9S_KEYS
    owner = secret["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"]) == (USER.api_version, "LocalUser")
    uri = base64.b64decode(secret["data"]["uri"]).decode()
    with psycopg.connect(uri, autocommit=True) as connection:
        connection.execute("CREATE TABLE t (id int PRIMARY KEY)")
        connection.execute("INSERT INTO t VALUES (1)")

    create(kube, BACKUP, ns, backup, {"forProvider": {"databaseRef": {"name": db}}})
    dump = Path(ready(kube, BACKUP, ns, backup)["status"]["atProvider"]["file"])
    assert dump.parent == Path(postgres.backup_dir) / ns  # two namespaces may name dumps alike
    with psycopg.connect(uri, autocommit=True) as connection:
        connection.execute("INSERT INTO t VALUES (2)")
    create(
        kube,
        RESTORE,
        ns,
        restore,
        {"forProvider": {"backupRef": {"name": backup}, "databaseRef": {"name": db}}},
    )
    ready(kube, RESTORE, ns, restore)
    with psycopg.connect(uri, autocommit=True) as connection:
        assert connection.execute("SELECT id FROM t").fetchall() == [(1,)]

    users = kube.get(CLUSTER_PROVIDER_CONFIGS, None, LOCAL_PROVIDER_CONFIG)["status"]["users"]
    assert users >= 4
    gone(kube, USER, ns, app)
    assert kube.get(SECRETS, ns, f"{app}-creds") is None
    gone(kube, BACKUP, ns, backup)
    assert not dump.exists()
    gone(kube, RESTORE, ns, restore)
    gone(kube, DB, ns, db)
    assert not database_exists(postgres, db)


def test_namespaces_never_adopt_each_others_databases(
    kube: Kube, postgres: PostgresInfo, new_namespace: Callable[[], str]
) -> None:
    """One server, one set of database names: a name another namespace (or a cluster-scoped
    LocalDatabase) holds is a conflict, reported, and never dropped by the loser."""
    team_a, team_b = new_namespace(), new_namespace()
    name = unique("shared")
    create(kube, DB, team_a, "db", {"forProvider": {}}, {EXTERNAL_NAME: name})
    ready(kube, DB, team_a, "db")
    create(kube, DB, team_b, "db", {"forProvider": {}}, {EXTERNAL_NAME: name})
    message = not_synced(kube, DB, team_b, "db")["message"]
    assert f"was not made for LocalDatabase {team_b}/db" in message, message
    gone(kube, DB, team_b, "db")
    assert database_exists(postgres, name)
    gone(kube, DB, team_a, "db")
    assert not database_exists(postgres, name)


def test_a_namespaced_provider_config_reads_its_own_namespace(
    kube: Kube, postgres: PostgresInfo, new_namespace: Callable[[], str]
) -> None:
    ns = new_namespace()
    values = {
        "endpoint": postgres.host,
        "port": str(postgres.port),
        "username": postgres.superuser,
        "password": postgres.password,
    }
    kube.create(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "pg", "namespace": ns},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
        },
    )
    kube.create(
        NS_PROVIDER_CONFIGS,
        {
            "apiVersion": NS_PROVIDER_CONFIGS.api_version,
            "kind": "ProviderConfig",
            "metadata": {"name": "mine", "namespace": ns},
            "spec": {
                "credentials": {
                    "source": "PostgreSQLConnectionSecret",
                    "connectionSecretRef": {"name": "pg"},
                }
            },
        },
    )
    db = unique("own")
    spec = {"providerConfigRef": {"kind": "ProviderConfig", "name": "mine"}, "forProvider": {}}
    create(kube, DB, ns, db, spec)
    ready(kube, DB, ns, db)

    def in_use() -> dict[str, Any] | None:
        config = kube.get(NS_PROVIDER_CONFIGS, ns, "mine") or {}
        used = (config.get("status") or {}).get("users") == 1
        return config if used and IN_USE_FINALIZER in config["metadata"]["finalizers"] else None

    eventually(in_use, "the ProviderConfig counting its user")

    # named elsewhere, the database is no user of it any more: it can go
    kube.patch(DB, ns, db, {"spec": {"providerConfigRef": CLUSTER_CONFIG}})
    eventually(
        lambda: (
            (kube.get(NS_PROVIDER_CONFIGS, ns, "mine") or {}).get("status", {}).get("users") == 0
        ),
        "the ProviderConfig counting no user",
    )
    kube.delete(NS_PROVIDER_CONFIGS, ns, "mine")
    eventually(lambda: kube.get(NS_PROVIDER_CONFIGS, ns, "mine") is None, "ProviderConfig gone")

    missing = unique("nowhere")
    create(
        kube,
        DB,
        ns,
        missing,
        {**spec, "providerConfigRef": {"kind": "ProviderConfig", "name": "gone"}},
    )
    message = not_synced(kube, DB, ns, missing)["message"]
    assert f"ProviderConfig {ns}/gone not found" in message, message
    # as in Crossplane, deleting needs the server: name one that exists before deleting
    kube.patch(DB, ns, missing, {"spec": {"providerConfigRef": CLUSTER_CONFIG}})
    gone(kube, DB, ns, missing)
    gone(kube, DB, ns, db)
    assert not database_exists(postgres, db)


def test_management_policies_without_delete_keep_the_database(
    kube: Kube, postgres: PostgresInfo, new_namespace: Callable[[], str]
) -> None:
    """No Delete: deleting the object keeps the database (Crossplane 2's deletionPolicy
    Orphan); no Create: a database that is not there is reported, not made."""
    ns = new_namespace()
    db = unique("kept")
    keep = ["Observe", "Create", "Update", "LateInitialize"]
    create(kube, DB, ns, db, {"forProvider": {}, "managementPolicies": keep})
    ready(kube, DB, ns, db)
    gone(kube, DB, ns, db)
    assert database_exists(postgres, db)
    # observed only, it is adopted again (the owner role's marker names this namespace and name)
    create(kube, DB, ns, db, {"forProvider": {}, "managementPolicies": ["Observe"]})
    ready(kube, DB, ns, db)
    kube.patch(DB, ns, db, {"spec": {"managementPolicies": ["*"]}})
    gone(kube, DB, ns, db)
    assert not database_exists(postgres, db)

    absent = unique("absent")
    create(kube, DB, ns, absent, {"forProvider": {}, "managementPolicies": ["Observe"]})
    message = not_synced(kube, DB, ns, absent)["message"]
    assert "does not allow Create" in message, message
    gone(kube, DB, ns, absent)
