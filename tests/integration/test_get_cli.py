"""``klutch-gitops get``, ``get claims`` and ``reconcile`` against a running reconciler on the real
stack: what a person sees of a repository with a refused document, its App claim, and a reconcile
request."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading

import pytest
import typer
from kubernetes import client
from typer.testing import CliRunner

from klutch_gitops.apis import REQUESTED_AT_ANNOTATION
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.errors import KlutchError
from klutch_gitops.inspect import commands
from klutch_gitops.inspect.claims import REPOSITORY_LABEL
from klutch_gitops.kube.client import Kube
from tests.env import Env
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.wait import eventually

from .test_binding_status import Bound, bound

CLI = (
    "import typer; from klutch_gitops.inspect import commands; "
    "app = typer.Typer(); commands.register(app); app()"
)


@pytest.fixture
def refused(env: Env) -> Bound:
    """A RepositoryBinding whose repository holds one good claim and one refused document."""
    files = {
        "claims/good.yaml": lambda namespace: claim("good", namespace),
        "claims/bad.yaml": lambda _namespace: claim("bad", "not-ours"),  # may not write there
    }
    binding = bound(env, files)
    eventually(lambda: binding.settled("False"), "Ready=False for the refused document", 60)
    return binding


def cli() -> tuple[typer.Typer, CliRunner]:
    app = typer.Typer()
    commands.register(app)
    return app, CliRunner()


def test_get_shows_ready_applied_and_the_refusal(refused: Bound, stack: StackInfo) -> None:
    app, runner = cli()
    admin = stack.clusters["control-plane"].kubeconfig
    result = runner.invoke(
        app, ["get", "--kubeconfig", admin, "-n", refused.consumer, "-o", "wide"]
    )
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    columns = header.split()[:3]
    assert columns == ["NAME", "READY", "REASON"]
    cells = row.split()
    head = git(refused.remote, "rev-parse", "main")
    assert cells[:6] == ["team", "False", "DocumentsRefused", head[:12], "1", "1"]
    assert "claims/bad.yaml" in row  # wide: the first refusal in MESSAGE

    result = runner.invoke(app, ["get", "repos", "--kubeconfig", admin, "-A", "-o", "json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.output)
    (ours,) = [i for i in listed["items"] if i["metadata"]["namespace"] == refused.consumer]
    assert ours["kind"] == "RepositoryBinding"
    assert ours["status"]["lastAppliedCommit"] == head

    result = runner.invoke(
        app, ["get", "--kubeconfig", admin, "-n", refused.consumer, "-o", "name"]
    )
    assert result.output.splitlines() == ["repositorybinding.gitops.klutch.anynines.com/team"]


def test_get_claims_shows_the_app_claim(
    refused: Bound, stack: StackInfo, clusters: dict[str, client.ApiClient]
) -> None:
    app, runner = cli()
    kubeconfig = stack.clusters["app"].kubeconfig
    result = runner.invoke(
        app, ["get", "claims", "--kubeconfig", kubeconfig, "-n", refused.namespace]
    )
    assert result.exit_code == 0, result.output
    header, *rows = result.output.splitlines()
    assert header.split()[:2] == ["KIND", "NAME"]
    (row,) = rows  # the refused document never reached the App Cluster
    cells = row.split()
    assert cells[:2] == [POSTGRES.kind, "good"]
    live = Kube(clusters["app"]).get(POSTGRES, refused.namespace, "good")
    assert live is not None
    assert live["metadata"]["labels"][REPOSITORY_LABEL] in cells


def test_get_claims_watch_prints_a_changed_claim(
    refused: Bound, stack: StackInfo, clusters: dict[str, client.ApiClient]
) -> None:
    kubeconfig = stack.clusters["app"].kubeconfig
    lines: queue.Queue[str] = queue.Queue()
    watch = subprocess.Popen(
        [sys.executable, "-c", CLI, "get", "claims", "-w", "--kubeconfig", kubeconfig,
         "-n", refused.namespace],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        threading.Thread(target=lambda: [lines.put(x) for x in watch.stdout], daemon=True).start()
        assert lines.get(timeout=30).startswith("KIND")
        assert lines.get(timeout=10).split()[:2] == [POSTGRES.kind, "good"]
        note = {"metadata": {"annotations": {"example.com/touched": "yes"}}}
        Kube(clusters["app"]).patch(POSTGRES, refused.namespace, "good", note)
        assert lines.get(timeout=10).split()[:2] == [POSTGRES.kind, "good"]  # the change, a row
    finally:
        watch.terminate()
        watch.wait(10)


def test_reconcile_sets_the_request_and_watch_prints_the_change(
    refused: Bound, stack: StackInfo
) -> None:
    admin = stack.clusters["control-plane"].kubeconfig
    lines: queue.Queue[str] = queue.Queue()
    watch = subprocess.Popen(
        [sys.executable, "-c", CLI, "get", "-w", "--kubeconfig", admin, "-n", refused.consumer],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        threading.Thread(target=lambda: [lines.put(x) for x in watch.stdout], daemon=True).start()
        assert lines.get(timeout=30).startswith("NAME")
        assert lines.get(timeout=10).startswith("team")
        app, runner = cli()
        result = runner.invoke(
            app, ["reconcile", f"{refused.consumer}/team", "--kubeconfig", admin, "--no-wait"]
        )
        assert result.exit_code == 0, result.output
        live = refused.live()
        assert live["metadata"]["annotations"][REQUESTED_AT_ANNOTATION].endswith("Z")
        assert lines.get(timeout=10).startswith("team")  # the watch printed the changed binding
    finally:
        watch.terminate()
        watch.wait(10)


def test_reconcile_of_a_binding_that_stays_refused_exits_1_with_the_reason(
    refused: Bound, stack: StackInfo
) -> None:
    admin = stack.clusters["control-plane"].kubeconfig
    app, runner = cli()
    where = [f"{refused.consumer}/team", "--kubeconfig", admin, "--timeout", "30"]
    result = runner.invoke(app, ["reconcile", *where])
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, KlutchError)  # the CLI prints it as one error line
    assert "is not Ready" in result.exception.message
    assert "DocumentsRefused" in result.exception.message
