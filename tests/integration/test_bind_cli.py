"""``klutch-bind exports|bind|status|unbind`` against a real bind API, real Dex, real clusters."""

from __future__ import annotations

import base64
import json
import os
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bind_api.authz import ALLOWED_GROUPS_ANNOTATION
from bind_api.bindings import TEMPLATES
from bind_api.config import BindApiConfig
from bind_api.consumer import PROVIDER_SECRETS
from bind_api.server import serve_in_background
from klutch_gitops.bind_client import SERVICE_BINDINGS
from klutch_gitops.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube import NAMESPACES, SECRETS, Kube
from klutch_gitops.localstack.processes import free_port
from klutch_gitops.localstack.stack import StackInfo

from .gitops import eventually

CLI = [sys.executable, "-m", "klutch_gitops.bind_cli"]
API = "postgresqlinstances.anynines.com"


@pytest.fixture(scope="module")
def id_token(stack: StackInfo) -> str:
    with httpx.Client(verify=ssl.create_default_context(cafile=stack.dex.ca)) as http:
        response = http.post(
            f"{stack.dex.issuer}/token",
            data={
                "grant_type": "password",
                "username": stack.dex.email,
                "password": stack.dex.password,
                "scope": "openid email groups",
            },
            auth=(stack.dex.automation_client_id, stack.dex.automation_client_secret),
        )
    response.raise_for_status()
    return response.json()["id_token"]


@pytest.fixture(scope="module")
def bind_url(stack: StackInfo, clusters) -> Iterator[str]:
    """A bind API server in the background, and a template (with a claim) for the test's API."""
    admin = Kube(clusters["control-plane"])
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    install_crds(clusters["app"], load_crds(cluster="app"))
    namespace = f"a-bindcli-{uuid.uuid4().hex[:6]}"  # sorts first: this template wins
    admin.apply(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    admin.apply(
        TEMPLATES[0],
        {
            "apiVersion": TEMPLATES[0].api_version,
            "kind": TEMPLATES[0].kind,
            "metadata": {
                "name": "postgresqlinstances",
                "namespace": namespace,
                "annotations": {ALLOWED_GROUPS_ANNOTATION: "team-a"},
            },
            "spec": {
                "APIServiceSelector": {"group": "anynines.com", "resource": "postgresqlinstances"},
                "permissionClaims": [PROVIDER_SECRETS],
            },
        },
    )
    port = free_port()
    server = serve_in_background(
        BindApiConfig(
            control_plane_kubeconfig=Path(stack.clusters["control-plane"].kubeconfig),
            issuer=stack.dex.issuer,
            audiences=(stack.dex.automation_client_id,),
            issuer_ca=Path(stack.dex.ca),
            listen=f"127.0.0.1:{port}",
        )
    )
    url = f"http://127.0.0.1:{port}"
    eventually(lambda: _healthy(url), "the bind API to listen")
    yield url
    server.should_exit = True
    admin.delete(NAMESPACES, None, namespace)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz").status_code == 200
    except httpx.TransportError:
        return False


def cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_exports_show_the_allowed_api(bind_url: str, id_token: str, tmp_path: Path) -> None:
    text = cli(tmp_path, "exports", bind_url, "--token", id_token)
    assert text.returncode == 0, text.stderr
    assert API in text.stdout
    assert "yes" in text.stdout
    data = json.loads(cli(tmp_path, "exports", bind_url, "--token", id_token, "-o", "json").stdout)
    mine = next(e for e in data["exports"] if e["api"] == API)
    assert mine["allowed"] is True
    assert mine["permissionClaims"] == [PROVIDER_SECRETS]


def test_a_bad_token_says_to_log_in(bind_url: str, tmp_path: Path) -> None:
    result = cli(tmp_path, "status", bind_url, "--token", "not-a-jwt")
    assert result.returncode == 1
    assert "not authenticated" in result.stderr
    assert "klutch-bind login" in result.stderr


def test_bind_status_unbind(
    bind_url: str, id_token: str, stack: StackInfo, clusters, tmp_path: Path
) -> None:
    app, control_plane = Kube(clusters["app"]), Kube(clusters["control-plane"])
    kubeconfig = stack.clusters["app"].kubeconfig
    cluster_id = f"cli-{uuid.uuid4().hex[:6]}"
    common = ["--api", API, "--cluster-id", cluster_id, "--token", id_token]

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

    binding = app.get(SERVICE_BINDINGS, "klutch-bind", API)
    assert binding is not None
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
    assert not any(b"kubeconfig:" in p.read_bytes() for p in out.iterdir() if p.suffix == ".yaml")
    assert f"klutch-bind/{consumer}-kubeconfig" in (out / "README.md").read_text()

    listed = cli(tmp_path, "status", bind_url, "--token", id_token, "-o", "yaml")
    assert listed.returncode == 0, listed.stderr
    assert any(
        b["consumerNamespace"] == consumer and b["clusterId"] == cluster_id
        for b in yaml.safe_load(listed.stdout)["bindings"]
    )

    gone = cli(
        tmp_path, "unbind", bind_url, consumer, "--token", id_token, "--kubeconfig", kubeconfig
    )
    assert gone.returncode == 0, gone.stderr
    assert f"APIServiceBinding/klutch-bind/{API}" in gone.stdout
    assert app.get(SERVICE_BINDINGS, "klutch-bind", API) is None
    assert app.get(SECRETS, "klutch-bind", f"{consumer}-kubeconfig") is None
    eventually(
        lambda: control_plane.get(NAMESPACES, None, consumer) is None, "the consumer to go", 120
    )
    again = cli(tmp_path, "unbind", bind_url, consumer, "--token", id_token)
    assert again.returncode == 1
    assert "no binding" in again.stderr
