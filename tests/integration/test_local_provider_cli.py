"""``klutch-gitops local-provider`` as the stack runs it: a child process that writes its own
ProviderConfig from ``--postgres-*`` flags and says on ``/healthz`` when it is serving.

The provider acts on the managed resources of every ProviderConfig, so a second provider process
on the Control Plane would fight the stack's over the same objects: these tests look at the
stack's own process instead.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import uuid

import httpx
import psycopg
import pytest
from kubernetes import client

from klutch_gitops.dev.localstack.postgres import PostgresInfo
from klutch_gitops.dev.localstack.processes import Process, cmdline
from klutch_gitops.dev.localstack.stack import LOCAL_PROVIDER_CONFIG, LocalStack, StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import SECRETS
from klutch_local.provider.api import (
    DATABASES,
    FIELD_MANAGER,
    IN_USE_FINALIZER,
    PROVIDER_CONFIGS,
    conditions_of,
    load_crds,
)
from tests.kit.wait import eventually

pytestmark = pytest.mark.crossplane

CLI = [sys.executable, "-m", "klutch_gitops.cli", "local-provider"]
SECRET_NAMESPACE = "crossplane-system"


@pytest.fixture(scope="module")
def provider(local_stack: LocalStack) -> Process:
    """The stack's provider process."""
    found = [p for p in local_stack.processes if p.name == "local-provider"]
    assert len(found) == 1
    assert found[0].running, found[0].log_tail()
    return found[0]


@pytest.fixture(scope="module")
def postgres(stack: StackInfo) -> PostgresInfo:
    assert stack.postgres is not None
    return stack.postgres


@pytest.fixture(scope="module")
def kube(clusters: dict[str, client.ApiClient]) -> Kube:
    return Kube(clusters["control-plane"])


def option(argv: list[str], name: str) -> str:
    """The value of ``--name=value`` in ``argv``."""
    values = [arg.split("=", 1)[1] for arg in argv if arg.startswith(f"--{name}=")]
    assert len(values) == 1, f"--{name} in {argv}"
    return values[0]


def test_it_is_started_with_a_password_file_and_never_shows_the_password(
    provider: Process, postgres: PostgresInfo
) -> None:
    assert provider.popen is not None
    argv = cmdline(provider.popen.pid)
    assert argv == provider.argv
    assert argv[1:4] == ["-m", "klutch_gitops.cli", "local-provider"]
    assert option(argv, "provider-config") == LOCAL_PROVIDER_CONFIG
    assert option(argv, "postgres-port") == str(postgres.port)
    assert option(argv, "postgres-password-file") == postgres.password_file
    assert all(postgres.password not in arg for arg in argv)
    log = provider.log.read_text()
    assert "local provider running against" in log
    assert postgres.password not in log


def test_it_serves_health_on_loopback(provider: Process) -> None:
    port = option(provider.argv, "health-port")
    for path in ("/healthz", "/readyz"):
        response = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5.0)
        assert (response.status_code, response.text) == (200, "ok\n")
    assert httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5.0).status_code == 404


def test_it_installs_its_crds(clusters: dict[str, client.ApiClient]) -> None:
    extensions = client.ApiextensionsV1Api(clusters["control-plane"])
    for crd in load_crds():
        served = extensions.read_custom_resource_definition(crd["metadata"]["name"])
        established = {c.type: c.status for c in served.status.conditions or []}
        assert established.get("Established") == "True", crd["metadata"]["name"]


def test_it_bootstraps_a_provider_config_for_the_stacks_server(
    kube: Kube, postgres: PostgresInfo
) -> None:
    pc = kube.get(PROVIDER_CONFIGS, None, LOCAL_PROVIDER_CONFIG)
    assert pc is not None
    secret_name = f"{LOCAL_PROVIDER_CONFIG}-postgresql"
    assert pc["spec"]["credentials"] == {
        "source": "PostgreSQLConnectionSecret",
        "connectionSecretRef": {"name": secret_name, "namespace": SECRET_NAMESPACE},
    }

    # the provider keeps it: counted users, and the in-use finalizer
    def kept() -> dict | None:
        found = kube.get(PROVIDER_CONFIGS, None, LOCAL_PROVIDER_CONFIG) or {"metadata": {}}
        return found if IN_USE_FINALIZER in (found["metadata"].get("finalizers") or []) else None

    assert isinstance(eventually(kept, "the in-use finalizer")["status"]["users"], int)

    secret = kube.get(SECRETS, SECRET_NAMESPACE, secret_name)
    assert secret is not None
    values = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert values == {
        "endpoint": postgres.host,
        "port": str(postgres.port),
        "username": postgres.superuser,
        "password": postgres.password,
    }
    assert {m["manager"] for m in secret["metadata"]["managedFields"]} == {FIELD_MANAGER}
    with psycopg.connect(
        host=values["endpoint"],
        port=int(values["port"]),
        user=values["username"],
        password=values["password"],
        dbname="postgres",
    ) as connection:
        assert connection.execute("SELECT current_user").fetchone() == (postgres.superuser,)


def test_a_database_on_its_provider_config_gets_ready_and_goes(kube: Kube) -> None:
    db = f"cli-db-{uuid.uuid4().hex[:6]}"
    kube.create(
        DATABASES,
        {
            "apiVersion": DATABASES.api_version,
            "kind": DATABASES.kind,
            "metadata": {"name": db},
            "spec": {"providerConfigRef": {"name": LOCAL_PROVIDER_CONFIG}, "forProvider": {}},
        },
    )
    try:
        eventually(
            lambda: (
                conditions_of(kube.get(DATABASES, None, db) or {}).get("Ready", {}).get("status")
                == "True"
            ),
            f"LocalDatabase {db} Ready",
            timeout=60,
        )
    finally:
        kube.delete(DATABASES, None, db)
    eventually(lambda: kube.get(DATABASES, None, db) is None, f"LocalDatabase {db} gone")


def test_a_server_without_a_password_file_is_refused(stack: StackInfo) -> None:
    """Refused before the command touches the cluster: no second provider ever runs."""
    done = subprocess.run(
        [
            *CLI,
            f"--kubeconfig={stack.clusters['control-plane'].kubeconfig}",
            "--postgres-host=127.0.0.1",
            f"--provider-config=refused-{uuid.uuid4().hex[:6]}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "--postgres-host needs --postgres-password-file" in done.stderr
