"""The local provider's decisions: SQL from spec and observation, conditions, names, the server."""

from __future__ import annotations

import base64
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from klutch_gitops.dev.localstack import postgres
from klutch_gitops.dev.localstack.postgres import PostgresPaths
from klutch_gitops.errors import KlutchError
from klutch_local.provider import api, database, user
from klutch_local.provider.api import ReconcileError
from klutch_local.provider.backup import dump_file
from klutch_local.provider.managed import trigger
from klutch_local.provider.providerconfig import finalizers_for
from klutch_local.provider.restore import restored
from klutch_local.provider.server import Server, server_from

CLI = [sys.executable, "-m", "klutch_gitops.cli"]
SERVER = Server("127.0.0.1", 5433, "postgres", "pw", None, Path("/bin"))


def text(plan: list[Any]) -> list[list[str]]:
    return [[statement.as_string() for statement in batch] for batch in plan]


def mr(name: str = "orders", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api.API_VERSION,
        "kind": "LocalDatabase",
        "metadata": {"name": name, "uid": "uid-1", "generation": 1},
        "spec": spec,
    }


# -- conventions ---------------------------------------------------------------------------------


def test_an_unchanged_condition_keeps_its_transition_time() -> None:
    first = api.set_conditions([], [api.available(), api.reconcile_success()], 1, "t1")
    again = api.set_conditions(first, [api.available(), api.reconcile_success()], 1, "t2")
    assert again == first
    assert {c["lastTransitionTime"] for c in again} == {"t1"}


def test_a_changed_condition_moves_and_the_other_stays() -> None:
    first = api.set_conditions([], [api.available(), api.reconcile_success()], 1, "t1")
    failed = api.set_conditions(first, [api.reconcile_error("observe failed: boom")], 1, "t2")
    by_type = {c["type"]: c for c in failed}
    assert by_type["Ready"]["lastTransitionTime"] == "t1"
    assert by_type["Synced"] == {
        "type": "Synced",
        "status": "False",
        "reason": "ReconcileError",
        "message": "observe failed: boom",
        "observedGeneration": 1,
        "lastTransitionTime": "t2",
    }


def test_a_new_generation_is_a_new_condition() -> None:
    first = api.set_conditions([], [api.available()], 1, "t1")
    assert api.set_conditions(first, [api.available()], 2, "t2")[0]["lastTransitionTime"] == "t2"


def test_external_name_defaults_to_the_name() -> None:
    assert api.external_name(mr("orders")) == "orders"
    named = mr("orders")
    named["metadata"]["annotations"] = {api.EXTERNAL_NAME: "orders_v2"}
    assert api.external_name(named) == "orders_v2"


def test_managed_resource_fields() -> None:
    assert api.provider_config_name(mr()) == "default"
    assert api.provider_config_name(mr(providerConfigRef={"name": "pg"})) == "pg"
    assert not api.orphans(mr())
    assert api.orphans(mr(deletionPolicy="Orphan"))
    assert api.connection_secret_ref(mr(writeConnectionSecretToRef={"name": "s"})) is None
    ref = {"name": "s", "namespace": "ns"}
    assert api.connection_secret_ref(mr(writeConnectionSecretToRef=ref)) == ("ns", "s")


def test_controller_reference_marks_what_is_ours() -> None:
    owner = mr()
    secret = {"metadata": {"ownerReferences": [api.controller_reference(owner)]}}
    assert api.controlled_by(secret, owner)
    stranger = {"metadata": {"ownerReferences": [{"uid": "uid-1", "controller": False}]}}
    assert not api.controlled_by(stranger, owner)


@pytest.mark.parametrize(
    ("name", "spare", "ok"),
    [
        ("a" * 63, 0, True),
        ("a" * 64, 0, False),
        ("a" * 58, 6, False),
        ("ü" * 31, 0, True),
        ("", 0, False),
    ],
)
def test_names_must_fit_postgresql(name: str, spare: int, ok: bool) -> None:
    if ok:
        assert api.pg_identifier(name, "database name", spare) == name
    else:
        with pytest.raises(ReconcileError, match=r"crossplane\.io/external-name"):
            api.pg_identifier(name, "database name", spare)


def test_only_what_a_person_changes_triggers_a_reconcile() -> None:
    obj = mr()
    obj["metadata"]["resourceVersion"] = "1"
    with_status = {**obj, "status": {"atProvider": {"sizeBytes": 9}}}
    with_status["metadata"] = {**obj["metadata"], "resourceVersion": "2"}
    assert trigger(with_status) == trigger(obj)
    edited = {**obj, "metadata": {**obj["metadata"], "generation": 2}}
    assert trigger(edited) != trigger(obj)
    annotated = {**obj, "metadata": {**obj["metadata"], "annotations": {"a": "b"}}}
    assert trigger(annotated) != trigger(obj)


def test_provider_crds_follow_crossplane() -> None:
    crds = {crd["spec"]["names"]["kind"]: crd for crd in api.load_crds()}
    assert set(crds) == {
        "ProviderConfig",
        "LocalDatabase",
        "LocalUser",
        "LocalBackup",
        "LocalRestore",
    }
    for kind, crd in crds.items():
        assert crd["spec"]["group"] == api.GROUP
        assert crd["spec"]["scope"] == "Cluster"
        (version,) = crd["spec"]["versions"]
        assert version["subresources"] == {"status": {}}
        if kind == "ProviderConfig":
            continue
        columns = [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c]
        assert columns == ["READY", "SYNCED", "EXTERNAL-NAME", "AGE"], kind
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert spec["properties"]["deletionPolicy"]["enum"] == ["Orphan", "Delete"]
        assert spec["properties"]["providerConfigRef"]["default"] == {"name": "default"}
    user_spec = crds["LocalUser"]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "writeConnectionSecretToRef" in user_spec["properties"]["spec"]["required"]


# -- LocalDatabase -------------------------------------------------------------------------------

ROLE = database.Role("orders_owner", api.marker("LocalDatabase", "orders"))


def observed(limit: int = -1, settings: dict[str, str] | None = None) -> database.Database:
    return database.Database(ROLE, limit, settings or {}, 8000000)


def test_database_knobs_map_klutch_parameters_to_settings() -> None:
    params = {"statementTimeout": 30000, "tempFileLimit": -1, "workMem": "8MB", "other": 1}
    assert database.desired_settings(params) == {
        "statement_timeout": "30000",
        "temp_file_limit": "-1",
        "work_mem": "8MB",
    }
    assert database.parse_settings(["work_mem=8MB", "search_path=a,b"]) == {
        "work_mem": "8MB",
        "search_path": "a,b",
    }
    assert database.parse_settings(None) == {}


def test_a_new_database_gets_its_owner_role_first() -> None:
    plan = database.create_plan('we"ird', "orders", {"connectionLimit": 5, "workMem": "4MB"}, None)
    assert text(plan) == [
        [
            'CREATE ROLE "we""ird_owner" NOLOGIN',
            'COMMENT ON ROLE "we""ird_owner" IS '
            "'managed by klutch-gitops local-provider: LocalDatabase/orders'",
        ],
        ['CREATE DATABASE "we""ird" OWNER "we""ird_owner" CONNECTION LIMIT 5'],
        ['REVOKE ALL ON DATABASE "we""ird" FROM PUBLIC'],
        ['ALTER DATABASE "we""ird" SET "work_mem" = \'4MB\''],
    ]


def test_an_owner_role_left_by_a_crash_is_reused() -> None:
    plan = database.create_plan("orders", "orders", {}, ROLE)
    # psycopg spaces a negative literal, so it can never make a -- comment
    assert text(plan)[0] == ['CREATE DATABASE "orders" OWNER "orders_owner" CONNECTION LIMIT  -1']


def test_a_database_as_specified_needs_nothing() -> None:
    params = {"connectionLimit": 10, "statementTimeout": 500}
    assert database.update_plan("orders", params, observed(10, {"statement_timeout": "500"})) == []


def test_database_updates_set_and_reset_only_the_knobs() -> None:
    current = observed(10, {"statement_timeout": "500", "work_mem": "4MB", "search_path": "x"})
    plan = database.update_plan("orders", {"connectionLimit": 20, "workMem": "8MB"}, current)
    assert text(plan) == [
        ['ALTER DATABASE "orders" WITH CONNECTION LIMIT 20'],
        [
            'ALTER DATABASE "orders" SET "work_mem" = \'8MB\'',
            'ALTER DATABASE "orders" RESET "statement_timeout"',
        ],
    ]


def test_someone_elses_database_is_a_conflict() -> None:
    foreign = database.Database(database.Role("postgres", None), -1, {}, 1)
    assert "was not made for LocalDatabase orders" in database.conflict(
        "postgres", "orders", None, foreign
    )
    stray_role = database.Role("orders_owner", "made by a person")
    assert "role 'orders_owner' exists" in database.conflict("orders", "orders", stray_role, None)
    other_resource = database.conflict("orders", "other", ROLE, observed())
    assert "was not made for LocalDatabase other" in other_resource
    assert database.conflict("orders", "orders", ROLE, observed()) == ""
    assert database.conflict("orders", "orders", None, None) == ""


# -- LocalUser -----------------------------------------------------------------------------------

USER_MARK = api.marker("LocalUser", "app")


def state(role: user.Role | None, **kw: Any) -> user.State:
    values = {"database_exists": True, "owner_exists": True} | kw
    return user.State("app", "orders", role=role, **values)


def test_a_new_owner_user_acts_as_the_owner_role() -> None:
    plan = user.plan(state(None), frozenset({"Owner"}), "app", "SCRAM-SHA-256$x")
    assert text(plan) == [
        [
            "CREATE ROLE \"app\" LOGIN PASSWORD 'SCRAM-SHA-256$x'",
            f"COMMENT ON ROLE \"app\" IS '{USER_MARK}'",
            'GRANT "orders_owner" TO "app"',
            'ALTER ROLE "app" IN DATABASE "orders" SET role = \'orders_owner\'',
        ]
    ]


def test_a_user_as_specified_needs_nothing() -> None:
    role = user.Role(USER_MARK, True, "orders_owner", frozenset({"CONNECT"}))
    assert user.plan(state(role), frozenset({"Owner", "CONNECT"}), "app", None) == []
    assert role.held("orders") == {"Owner", "CONNECT"}


def test_user_privileges_change_both_ways() -> None:
    role = user.Role(USER_MARK, True, "orders_owner", frozenset({"TEMPORARY"}))
    plan = user.plan(state(role), frozenset({"CONNECT", "CREATE"}), "app", None)
    assert text(plan) == [
        [
            'REVOKE "orders_owner" FROM "app"',
            'ALTER ROLE "app" IN DATABASE "orders" RESET role',
            'GRANT CONNECT, CREATE ON DATABASE "orders" TO "app"',
            'REVOKE TEMPORARY ON DATABASE "orders" FROM "app"',
        ]
    ]


def test_a_lost_password_is_replaced() -> None:
    role = user.Role(USER_MARK, True, "orders_owner", frozenset())
    plan = user.plan(state(role), frozenset({"Owner"}), "app", "SCRAM-SHA-256$y")
    assert text(plan) == [["ALTER ROLE \"app\" WITH LOGIN PASSWORD 'SCRAM-SHA-256$y'"]]


def test_user_problems_say_what_to_fix() -> None:
    owner = frozenset({"Owner"})
    assert "database 'orders' does not exist" in user.problem(
        state(None, database_exists=False), owner, "app"
    )
    assert "has no owner role 'orders_owner'" in user.problem(
        state(None, owner_exists=False), owner, "app"
    )
    assert user.problem(state(None, owner_exists=False), frozenset({"CONNECT"}), "app") == ""
    stranger = user.Role("a person's role", False, None, frozenset())
    assert "was not made for LocalUser app" in user.problem(state(stranger), owner, "app")


def test_credentials_use_a9s_keys_and_an_encoded_uri() -> None:
    details = user.credentials(SERVER, "app", "p@ss/w:rd", "my db")
    assert sorted(details) == ["host", "hosts", "name", "password", "port", "uri", "username"]
    assert details["hosts"] == '["127.0.0.1"]'
    assert details["port"] == "5433"
    assert details["uri"] == "postgresql://app:p%40ss%2Fw%3Ard@127.0.0.1:5433/my%20db"


def test_privileges_default_to_owner() -> None:
    assert user.desired_privileges({}) == {"Owner"}
    assert user.desired_privileges({"privileges": ["CONNECT"]}) == {"CONNECT"}


# -- LocalBackup, LocalRestore -------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../etc/passwd", "a/b", ".hidden", "a..b", ""])
def test_backup_names_stay_inside_the_store(name: str) -> None:
    with pytest.raises(ReconcileError, match="cannot name a dump file"):
        dump_file(Path("/store"), name)


def test_backup_file_name() -> None:
    assert dump_file(Path("/store"), "orders-2024.1") == Path("/store/orders-2024.1.dump")


def test_a_restore_runs_once_per_generation() -> None:
    assert not restored({}, 1)
    assert restored({"restoredGeneration": 1}, 1)
    assert not restored({"restoredGeneration": 1}, 2)


# -- ProviderConfig and its server ---------------------------------------------------------------


def secret(**values: str) -> dict[str, Any]:
    return {"data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}}


PC = {
    "spec": {
        "credentials": {
            "source": "PostgreSQLConnectionSecret",
            "connectionSecretRef": {"name": "pg", "namespace": "crossplane-system"},
        }
    }
}
CREDENTIALS = {"endpoint": "127.0.0.1", "port": "5433", "username": "postgres", "password": "pw"}


def test_server_from_a_provider_config() -> None:
    server = server_from("default", PC, secret(**CREDENTIALS), Path("/backups"), Path("/bin"))
    assert server == Server("127.0.0.1", 5433, "postgres", "pw", Path("/backups"), Path("/bin"))
    own_store = {"spec": {**PC["spec"], "backupStore": {"path": "/srv/dumps"}}}
    server = server_from("default", own_store, secret(**CREDENTIALS), Path("/x"), Path("/bin"))
    assert server.backup_dir == Path("/srv/dumps")


@pytest.mark.parametrize(
    ("provider_config", "values", "message"),
    [
        (None, CREDENTIALS, "ProviderConfig default not found"),
        (PC, None, "Secret crossplane-system/pg of ProviderConfig default not found"),
        (PC, {"endpoint": "h", "port": "1"}, "lacks the key(s) username, password"),
        (PC, {**CREDENTIALS, "port": "five"}, "port must be a number"),
    ],
)
def test_server_errors_name_what_is_missing(
    provider_config: dict[str, Any] | None, values: dict[str, str] | None, message: str
) -> None:
    with pytest.raises(ReconcileError, match=message.replace("(", r"\(").replace(")", r"\)")):
        server_from(
            "default", provider_config, secret(**values) if values else None, None, Path("/bin")
        )


def test_a_server_without_a_store_says_where_to_set_one() -> None:
    with pytest.raises(ReconcileError, match=r"spec\.backupStore\.path, or start the provider"):
        SERVER.store("default")


def test_a_provider_config_in_use_keeps_its_finalizer() -> None:
    assert finalizers_for({"finalizers": ["x"]}, 0) == ["x", api.IN_USE_FINALIZER]
    assert finalizers_for({"finalizers": [api.IN_USE_FINALIZER]}, 3) is None
    deleting = {"deletionTimestamp": "now", "finalizers": [api.IN_USE_FINALIZER, "x"]}
    assert finalizers_for(deleting, 1) is None
    assert finalizers_for(deleting, 0) == ["x"]


# -- the PostgreSQL server of the local stack ----------------------------------------------------


def test_postgres_runs_as_itself_unless_root() -> None:
    argv = ["/usr/lib/postgresql/15/bin/postgres", "-D", "/data"]
    assert postgres.as_server_user(argv, euid=1000) == argv
    uid = pwd.getpwnam("postgres").pw_uid  # Debian's postgresql package makes the user
    wrapped = postgres.as_server_user(argv, euid=0)
    assert wrapped[1:3] == ["--user", f"--map-user={uid}"]
    assert wrapped[wrapped.index("--") + 1 :] == argv


def test_postgres_listens_on_loopback_with_its_socket_in_the_state_dir() -> None:
    argv = postgres.server_argv(Path("/pg/bin"), PostgresPaths(Path("/state/postgres")), 5999)
    assert argv[:5] == ["/pg/bin/postgres", "-D", "/state/postgres/data", "-p", "5999"]
    assert "listen_addresses=127.0.0.1" in argv
    assert "unix_socket_directories=/state/postgres/run" in argv


def test_postgres_trusts_no_one() -> None:
    rules = [line.split() for line in postgres.HBA.splitlines() if not line.startswith("#")]
    assert {rule[-1] for rule in rules} == {"scram-sha-256"}
    assert ["host", "all", "all", "127.0.0.1/32", "scram-sha-256"] in rules


def test_a_socket_path_too_long_is_refused_with_a_fix(tmp_path: Path) -> None:
    with pytest.raises(KlutchError, match="shorter state directory"):
        postgres.check_socket_path(PostgresPaths(tmp_path / ("x" * 100)), 5432)
    postgres.check_socket_path(PostgresPaths(tmp_path), 5432)


def test_postgres_env_has_no_password() -> None:
    info = postgres.PostgresInfo("127.0.0.1", 5, "postgres", "secret", "/p", "/s", "/b", "/bin")
    assert "secret" not in info.env().values()
    assert info.env()["KLUTCH_POSTGRES_PASSWORD_FILE"] == "/p"


def test_cli_wants_the_password_in_a_file() -> None:
    result = subprocess.run(
        [*CLI, "local-provider", "--kubeconfig", "/none", "--postgres-host", "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "--postgres-password-file" in result.stderr
    assert "Traceback" not in result.stderr


def test_sql_is_composed_not_formatted() -> None:
    plan = database.settings_plan("x'; DROP DATABASE y; --", {"work_mem": "1'); --"}, {})
    (statement,) = plan[0]
    assert isinstance(statement, sql.Composed)
    assert statement.as_string() == (
        "ALTER DATABASE \"x'; DROP DATABASE y; --\" SET \"work_mem\" = '1''); --'"
    )
