"""``klutch-gitops dev run`` (what ``make run`` runs) provisions a real database from the example
repository: team-a's claims become Ready, and the credentials in the App Cluster connect."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, Resource, api_client
from klutch_gitops.kube.resources import SECRETS
from tests.kit.wait import eventually

from .catalogstack import conditions

pytestmark = pytest.mark.crossplane

CLI = [sys.executable, "-m", "klutch_gitops.cli"]
INSTANCES = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")


def test_make_run_provisions_the_example_database(tmp_path: Path) -> None:
    state = tmp_path / "dev"
    log = (tmp_path / "dev-run.log").open("w")
    run = subprocess.Popen(
        [*CLI, "dev", "run", "--state-dir", str(state)],
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        eventually(
            lambda: run.poll() is None and "reconciling" in (tmp_path / "dev-run.log").read_text(),
            "dev run to start the reconciler",
            timeout=300,
        )
        printed = (tmp_path / "dev-run.log").read_text()
        assert "psql" in printed
        assert "orders-binding-creds" in printed
        info = StackInfo.load(state / "stack.json")
        app = Kube(api_client(Path(info.clusters["app"].kubeconfig)))
        eventually(
            lambda: conditions(app.get(INSTANCES, "team-a", "orders-db")).get("Ready") == "True",
            "team-a's orders-db to be Ready in the App Cluster",
            timeout=240,
        )
        secret = eventually(
            lambda: app.get(SECRETS, "team-a", "orders-binding-creds"), "the credentials"
        )
        uri = base64.b64decode(secret["data"]["uri"]).decode()
        with psycopg.connect(uri) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
    finally:
        run.send_signal(signal.SIGINT)
        try:
            run.wait(timeout=60)
        except subprocess.TimeoutExpired:
            run.kill()
        subprocess.run([*CLI, "dev", "down", "--state-dir", str(state)], check=False, timeout=120)
        log.close()
