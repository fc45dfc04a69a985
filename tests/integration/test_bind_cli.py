"""``klutch-bind exports|bind|status|unbind`` against a real bind API, real Dex, real clusters."""

from __future__ import annotations

import base64
import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bind_api.bindings import BINDER_SECRET
from bind_api.server import build_server
from klutch_gitops.apis import (
    API_SERVICE_BINDINGS,
    API_SERVICE_NAMESPACES,
    REPOSITORY_BINDINGS,
    mapped_namespace,
)
from klutch_gitops.consumer import PROVIDER_SECRETS
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import CLUSTER_ROLES, NAMESPACES, SECRETS
from reconciler.manager import Reconciler
from tests.env import Env
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.wait import eventually

from .bindapi import API, bind_api_config, cli, dev_id_token, offered_api, serving, token_args
from .test_bindings import bare_repo


@pytest.fixture(scope="module")
def id_token(stack: StackInfo) -> str:
    return dev_id_token(stack)


@pytest.fixture(scope="module")
def bind_url(stack: StackInfo, clusters) -> Iterator[str]:
    """A bind API server in the background, and a template (with a claim) for the test's API."""
    with offered_api(clusters), serving(build_server(bind_api_config(stack))) as url:
        yield url


def test_exports_show_the_allowed_api(bind_url: str, id_token: str, tmp_path: Path) -> None:
    text = cli(tmp_path, "exports", bind_url, *token_args(tmp_path, id_token))
    assert text.returncode == 0, text.stderr
    assert API in text.stdout
    assert "yes" in text.stdout
    data = json.loads(
        cli(tmp_path, "exports", bind_url, *token_args(tmp_path, id_token), "-o", "json").stdout
    )
    mine = next(e for e in data["exports"] if e["api"] == API)
    assert mine["allowed"] is True
    assert mine["permissionClaims"] == [PROVIDER_SECRETS]


def test_a_bad_token_says_to_log_in(bind_url: str, tmp_path: Path) -> None:
    result = cli(tmp_path, "status", bind_url, *token_args(tmp_path, "not-a-jwt"))
    assert result.returncode == 1
    assert "not authenticated" in result.stderr
    assert "klutch-bind login" in result.stderr


def test_bind_status_unbind(
    bind_url: str, id_token: str, stack: StackInfo, clusters, tmp_path: Path
) -> None:
    app, control_plane = Kube(clusters["app"]), Kube(clusters["control-plane"])
    kubeconfig = stack.clusters["app"].kubeconfig
    cluster_id = f"cli-{uuid.uuid4().hex[:6]}"
    common = ["--api", API, "--cluster-id", cluster_id, *token_args(tmp_path, id_token)]

    unconfirmed = cli(tmp_path, "bind", bind_url, *common, "--kubeconfig", kubeconfig)
    assert unconfirmed.returncode == 1
    assert "--yes" in unconfirmed.stderr
    assert "secrets names [*]" in unconfirmed.stderr

    bound = cli(
        tmp_path, "bind", bind_url, *common, "--kubeconfig", kubeconfig, "--yes", "-o", "json"
    )
    assert bound.returncode == 0, bound.stderr
    report = json.loads(bound.stdout)
    consumer = report["consumerNamespace"]
    assert "kubeconfig" not in report  # the credentials are never printed
    assert control_plane.get(NAMESPACES, None, consumer) is not None

    binding = app.get(API_SERVICE_BINDINGS, None, API)  # cluster-scoped, as Klutch's
    assert binding is not None
    assert "namespace" not in binding["metadata"]
    assert binding["spec"]["kubeconfigSecretRef"]["name"] == f"{consumer}-kubeconfig"
    assert [c["state"] for c in binding["spec"]["permissionClaims"]] == ["Accepted"]
    assert {f["manager"] for f in binding["metadata"]["managedFields"]} == {"klutch-bind"}
    secret = app.get(SECRETS, "klutch-bind", f"{consumer}-kubeconfig")
    assert secret is not None
    config = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    assert config["contexts"][0]["context"]["namespace"] == consumer

    out = tmp_path / "gitops"
    written = cli(tmp_path, "bind", bind_url, *common, "--yes", "--gitops-out", str(out))
    assert written.returncode == 0, written.stderr
    assert consumer in written.stdout  # binding again is idempotent
    docs = [yaml.safe_load(p.read_text()) for p in sorted(out.glob("*.yaml"))]
    assert sorted(d["kind"] for d in docs) == ["APIServiceBinding", "Namespace"]
    assert all("namespace" not in d["metadata"] for d in docs)
    assert not any(b"kubeconfig:" in p.read_bytes() for p in out.iterdir() if p.suffix == ".yaml")
    assert f"klutch-bind/{consumer}-kubeconfig" in (out / "README.md").read_text()

    listed = cli(tmp_path, "status", bind_url, *token_args(tmp_path, id_token), "-o", "yaml")
    assert listed.returncode == 0, listed.stderr
    assert any(
        b["consumerNamespace"] == consumer and b["clusterId"] == cluster_id
        for b in yaml.safe_load(listed.stdout)["bindings"]
    )

    # What the binding may own: the App CRD the reconciler or the konnector made for it. A
    # stand-in dependent (a ClusterRole) shows that unbind orphans it instead of deleting it.
    dependent = app.create(
        CLUSTER_ROLES,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": f"owned-by-{cluster_id}",
                "ownerReferences": [
                    {
                        "apiVersion": API_SERVICE_BINDINGS.api_version,
                        "kind": API_SERVICE_BINDINGS.kind,
                        "name": API,
                        "uid": binding["metadata"]["uid"],
                        "controller": True,
                    }
                ],
            },
            "rules": [],
        },
    )
    gone = cli(
        tmp_path, "unbind", bind_url, consumer, "--yes",
        *token_args(tmp_path, id_token), "--kubeconfig", kubeconfig,
    )  # fmt: skip
    assert gone.returncode == 0, gone.stderr
    name = dependent["metadata"]["name"]
    eventually(
        lambda: (
            not (app.get(CLUSTER_ROLES, None, name) or {"metadata": {"x": 1}})["metadata"].get(
                "ownerReferences"
            )
        ),
        "the garbage collector to orphan the binding's dependent",
    )
    assert app.get(CLUSTER_ROLES, None, name) is not None
    app.delete(CLUSTER_ROLES, None, name)
    assert f"APIServiceBinding/{API}" in gone.stdout
    assert "APIServiceBinding/klutch-bind/" not in gone.stdout
    assert app.get(API_SERVICE_BINDINGS, None, API) is None
    assert app.get(SECRETS, "klutch-bind", f"{consumer}-kubeconfig") is None
    assert control_plane.get(NAMESPACES, None, consumer) is None  # unbind waited until gone
    again = cli(tmp_path, "unbind", bind_url, consumer, "--yes", *token_args(tmp_path, id_token))
    assert again.returncode == 1
    assert "no binding" in again.stderr


def test_bind_a_repository_that_the_reconciler_follows_until_unbound(
    bind_url: str, id_token: str, env: Env
) -> None:
    app, control_plane = Kube(env.clusters["app"]), Kube(env.clusters["control-plane"])
    kubeconfig = env.stack.clusters["app"].kubeconfig
    team = f"team-{uuid.uuid4().hex[:6]}"
    app.create(NAMESPACES, {"metadata": {"name": team}})
    remote = bare_repo(env.tmp_path, {"README.md": "team claims\n"}, env.git_server.root)
    url = env.git_server.url_of(remote)
    password_file = env.tmp_path / "git-password"
    password_file.write_text(f"git-{uuid.uuid4().hex}\n")
    common = [*token_args(env.tmp_path, id_token), "--kubeconfig", kubeconfig]
    reconciler = Reconciler(env.config()).start(serve_http=False)
    try:
        bound = cli(
            env.tmp_path,
            "bind", bind_url, "--api", API, "--cluster-id", f"repo-{uuid.uuid4().hex[:6]}",
            "--repo", url, "--branch", "main", "--path", "claims",
            "--namespace", team, "--git-username", "bot", "--git-password-file", str(password_file),
            "--yes", "-o", "json", *common,
        )  # fmt: skip
        assert bound.returncode == 0, bound.stderr
        report = json.loads(bound.stdout)
        consumer, name = report["consumerNamespace"], report["repositoryBinding"]
        password = password_file.read_text().strip()
        assert password not in bound.stdout + bound.stderr
        assert "kubeconfig" not in report

        binding = control_plane.get(REPOSITORY_BINDINGS, consumer, name)
        assert binding is not None
        spec = binding["spec"]
        assert (spec["url"], spec["branch"], spec["path"], spec["appNamespaces"]) == (
            url,
            "main",
            "claims",
            [team],
        )
        assert spec["controlPlane"]["kubeconfigSecretRef"]["name"] == BINDER_SECRET
        credentials = control_plane.get(SECRETS, consumer, spec["credentialsSecretRef"]["name"])
        assert base64.b64decode(credentials["data"]["password"]).decode() == password
        app_secret = control_plane.get(
            SECRETS, consumer, spec["appCluster"]["kubeconfigSecretRef"]["name"]
        )
        sent = yaml.safe_load(base64.b64decode(app_secret["data"]["kubeconfig"]))
        assert len(sent["contexts"]) == len(sent["users"]) == len(sent["clusters"]) == 1

        eventually(
            lambda: f"{consumer}.{name}" in reconciler.syncs, "the reconciler to follow the binding"
        )
        clone = env.tmp_path / "human"
        (clone / "claims").mkdir()
        (clone / "claims" / "orders.yaml").write_text(claim("orders", team))
        git(clone, "add", "-A")
        git(clone, "commit", "-q", "-m", "a database")
        git(clone, "push", "-q", "origin", "main")
        eventually(lambda: app.get(POSTGRES, team, "orders"), "the claim in the App namespace")
        mapped = mapped_namespace(consumer, team)
        eventually(
            lambda: control_plane.get(POSTGRES, mapped, "orders"),
            "the claim in the consumer's mapped Control Plane namespace",
        )
        mapping = control_plane.get(API_SERVICE_NAMESPACES, consumer, team)
        assert mapping["status"]["namespace"] == mapped
        head = git(clone, "rev-parse", "HEAD")
        eventually(
            lambda: _reported(control_plane.get(REPOSITORY_BINDINGS, consumer, name), remote, head),
            "the RepositoryBinding to report Ready at (or after) the pushed commit",
        )

        listed = cli(
            env.tmp_path, "status", bind_url, *token_args(env.tmp_path, id_token), "-o", "json"
        )
        assert listed.returncode == 0, listed.stderr
        (mine,) = [
            b for b in json.loads(listed.stdout)["bindings"] if b["consumerNamespace"] == consumer
        ]
        (repository,) = mine["repositories"]
        shown = repository.pop("object")
        assert repository == {"name": name, "url": url, "branch": "main", "path": "claims"}
        assert shown["metadata"]["namespace"] == consumer  # the tenant's own, with its status
        assert "managedFields" not in shown["metadata"]
        assert _reported(shown, remote, head)
        table = cli(env.tmp_path, "status", bind_url, *token_args(env.tmp_path, id_token)).stdout
        rows = [line.split() for line in table.splitlines() if line.startswith(consumer)]
        # below the bindings, the RepositoryBindings as `klutch-gitops get -A`: NAMESPACE NAME READY
        assert [name, "True"] in [row[1:3] for row in rows], table

        gone = cli(env.tmp_path, "unbind", bind_url, consumer, "--yes", *common)
        assert gone.returncode == 0, gone.stderr
        assert f"unbound {consumer}" in gone.stdout
        assert control_plane.get(REPOSITORY_BINDINGS, consumer, name) is None
        assert control_plane.get(NAMESPACES, None, consumer) is None
        assert control_plane.get(NAMESPACES, None, mapped) is None
        eventually(
            lambda: f"{consumer}.{name}" not in reconciler.syncs,
            "the reconciler to drop the repository",
        )
        assert (
            consumer
            not in cli(env.tmp_path, "status", bind_url, *token_args(env.tmp_path, id_token)).stdout
        )
    finally:
        reconciler.stop()
        app.delete(NAMESPACES, None, team)


def _reported(binding: dict | None, remote: Path, commit: str) -> bool:
    """Ready, its Secrets valid, and fetched ``commit`` or a later one (the bot's, say)."""
    status = (binding or {}).get("status") or {}
    ready = {c["type"]: c["status"] for c in status.get("conditions") or []}
    fetched = status.get("lastFetchedCommit")
    return bool(
        ready.get("Ready") == ready.get("SecretValid") == "True"
        and fetched
        and subprocess.run(
            ["git", "merge-base", "--is-ancestor", commit, fetched], cwd=remote, check=False
        ).returncode
        == 0
    )


@pytest.mark.parametrize(
    ("options", "message", "fix"),
    [
        (
            ["--repo", "https://git.example.com/team.git"],
            "--repo needs the App namespaces",
            "--namespace NS",
        ),
        (["--repo", "team claims", "--namespace", "team"], "is not a repository URL", "https://"),
        (
            ["--repo", "https://bot:hunter2@git.example.com/team.git", "--namespace", "team"],
            "carries credentials in the URL",
            "--git-password-file",
        ),
        (
            [
                "--repo",
                "https://git.example.com/team.git",
                "--namespace",
                "team",
                "--context",
                "nowhere",
            ],
            "has no context 'nowhere'",
            "--context",
        ),
    ],
)
def test_bad_repository_options_are_refused_before_anything_is_bound(
    bind_url: str,
    id_token: str,
    stack: StackInfo,
    tmp_path: Path,
    options: list[str],
    message: str,
    fix: str,
) -> None:
    kubeconfig = stack.clusters["app"].kubeconfig
    result = cli(
        tmp_path, "bind", bind_url, "--api", API, "--cluster-id", "refused", "--yes",
        *token_args(tmp_path, id_token), "--kubeconfig", kubeconfig, *options,
    )  # fmt: skip
    assert result.returncode == 1
    assert message in result.stderr
    assert "fix: " in result.stderr
    assert fix in result.stderr
    assert "Traceback" not in result.stderr
    assert "hunter2" not in result.stderr
    listed = cli(tmp_path, "status", bind_url, *token_args(tmp_path, id_token), "-o", "json")
    assert "refused" not in {b["clusterId"] for b in json.loads(listed.stdout)["bindings"]}
