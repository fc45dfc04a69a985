"""``klutch-gitops local-provider`` as the stack runs it: a child process that writes its own
ProviderConfig from ``--postgres-*`` flags and says on ``/healthz`` when it is serving."""

from __future__ import annotations

import base64
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from klutch_gitops.kube import NAMESPACES, SECRETS, Kube
from klutch_gitops.local_provider.api import DATABASES, PROVIDER_CONFIGS, conditions_of
from klutch_gitops.localstack.postgres import PostgresInfo
from klutch_gitops.localstack.processes import Process, free_port
from klutch_gitops.localstack.stack import StackInfo

from .gitops import eventually
from .pgserver import running_postgres


@pytest.fixture(scope="module")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresInfo]:
    with running_postgres(tmp_path_factory.mktemp("postgres")) as info:
        yield info


def healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_command_bootstraps_its_provider_config_and_serves(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    postgres: PostgresInfo,
    tmp_path: Path,
) -> None:
    kube = Kube(clusters["control-plane"])
    suffix = uuid.uuid4().hex[:6]
    pc, namespace, db = f"cli-{suffix}", f"t-cli-provider-{suffix}", f"cli-db-{suffix}"
    health = free_port()
    provider = Process(
        "local-provider",
        [
            sys.executable,
            "-m",
            "klutch_gitops.cli",
            "local-provider",
            f"--kubeconfig={stack.clusters['control-plane'].kubeconfig}",
            f"--postgres-host={postgres.host}",
            f"--postgres-port={postgres.port}",
            f"--postgres-user={postgres.superuser}",
            f"--postgres-password-file={postgres.password_file}",
            f"--backup-dir={postgres.backup_dir}",
            f"--provider-config={pc}",
            f"--secret-namespace={namespace}",
            f"--health-port={health}",
        ],
        tmp_path / "provider.log",
        tmp_path / "provider.pid",
    )
    provider.start()
    try:
        provider.wait_until(lambda: healthy(health), "/healthz", 60)
        ref = kube.get(PROVIDER_CONFIGS, None, pc)["spec"]["credentials"]["connectionSecretRef"]
        secret = kube.get(SECRETS, ref["namespace"], ref["name"])
        assert base64.b64decode(secret["data"]["port"]).decode() == str(postgres.port)
        assert postgres.password not in provider.log.read_text()

        kube.create(
            DATABASES,
            {
                "apiVersion": DATABASES.api_version,
                "kind": DATABASES.kind,
                "metadata": {"name": db},
                "spec": {"providerConfigRef": {"name": pc}, "forProvider": {}},
            },
        )
        eventually(
            lambda: (
                conditions_of(kube.get(DATABASES, None, db) or {}).get("Ready", {}).get("status")
                == "True"
            ),
            f"LocalDatabase {db} Ready",
        )
        kube.delete(DATABASES, None, db)
        eventually(lambda: kube.get(DATABASES, None, db) is None, f"LocalDatabase {db} gone")
        kube.delete(PROVIDER_CONFIGS, None, pc)
        eventually(lambda: kube.get(PROVIDER_CONFIGS, None, pc) is None, "ProviderConfig gone")
    finally:
        provider.stop()
        kube.delete(NAMESPACES, None, namespace)
    assert provider.popen is not None
    assert provider.popen.returncode == 0, provider.log_tail()
