"""Hostile tenant kubeconfigs against the real stack: the bind API (real Dex token, real Control
Plane) and a running reconciler following RepositoryBindings.

What the kubernetes client's own loader would do with them (kubernetes-client/python,
kubernetes/config/kube_config.py ``_load_authentication`` and exec_provider.py): an ``exec`` user
runs its command with subprocess.Popen while the kubeconfig is loaded, ``tokenFile`` is read from
the process's file system and sent as the bearer token, ``proxy-url`` becomes the client's proxy.
The field names are client-go's (k8s.io/client-go/tools/clientcmd/api/v1/types.go). Each attack
here must be refused by field name, with nothing created, no command run and not a single
connection to the attacker's server.
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from kubernetes import client

from bind_api.server import build_server
from klutch_gitops.apis import REPOSITORY_BINDINGS
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from reconciler.manager import Reconciler
from tests.env import Env
from tests.gitserver import GitServer
from tests.integration.bindapi import API, bind_api_config, dev_id_token, offered_api, serving
from tests.kit.claims import claim
from tests.kit.tenant import repository_binding
from tests.kit.wait import eventually
from tests.security.listener import Listener, listening

VICTIM_TOKEN = "victim-forge-token-0123456789"  # what tokenFile would have sent away


@dataclass
class Attacker:
    """The attacker's listener, and the marker file an exec plugin would touch."""

    listener: Listener
    marker: Path
    token_file: Path

    @property
    def port(self) -> int:
        return self.listener.port

    def assert_untouched(self) -> None:
        assert not self.marker.exists(), "the exec plugin ran"
        connections = self.listener.connections
        assert connections == [], f"the attacker's server was reached: {connections!r}"


@pytest.fixture
def attacker(tmp_path: Path) -> Iterator[Attacker]:
    token_file = tmp_path / "victim-token"
    token_file.write_text(VICTIM_TOKEN)
    with listening() as listener:
        yield Attacker(listener, tmp_path / "exec-ran", token_file)


def app_cluster(stack: StackInfo) -> tuple[str, str]:
    """The App Cluster's server and CA data, from the stack's own kubeconfig."""
    config = yaml.safe_load(Path(stack.clusters["app"].kubeconfig).read_text())
    cluster = config["clusters"][0]["cluster"]
    return cluster["server"], cluster["certificate-authority-data"]


def kubeconfig(server: str, ca: str, user: dict[str, Any], **cluster: Any) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "app",
            "clusters": [
                {
                    "name": "app",
                    "cluster": {"server": server, "certificate-authority-data": ca, **cluster},
                }
            ],
            "users": [{"name": "tenant", "user": user}],
            "contexts": [{"name": "app", "context": {"cluster": "app", "user": "tenant"}}],
        }
    )


def hostile(stack: StackInfo, attacker: Attacker) -> dict[str, tuple[str, str]]:
    """Each attack: its kubeconfig and the field that must be named in the refusal."""
    server, ca = app_cluster(stack)
    at_attacker = f"https://127.0.0.1:{attacker.port}"
    exec_plugin = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": "sh",
        "args": ["-c", f"touch {attacker.marker}"],
    }
    return {
        "exec": (kubeconfig(at_attacker, ca, {"exec": exec_plugin}), "users[0].user.exec"),
        "tokenFile": (
            kubeconfig(at_attacker, ca, {"tokenFile": str(attacker.token_file)}),
            "users[0].user.tokenFile",
        ),
        "proxy-url": (
            kubeconfig(
                server,
                ca,
                {"token": "tenant"},
                **{"proxy-url": f"http://127.0.0.1:{attacker.port}"},
            ),
            "clusters[0].cluster.proxy-url",
        ),
        "http": (
            kubeconfig(f"http://127.0.0.1:{attacker.port}", ca, {"token": "tenant"}),
            "clusters[0].cluster.server",
        ),
    }


def secrets_holding(admin: Kube, text: str) -> list[str]:
    """Every Secret on the Control Plane whose data contains ``text``."""
    items, _ = admin.list(SECRETS)
    return [
        f"{s['metadata']['namespace']}/{s['metadata']['name']}"
        for s in items
        if any(text.encode() in base64.b64decode(v) for v in (s.get("data") or {}).values())
    ]


# -- (a) the bind API -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def bind_api(stack: StackInfo, clusters: dict[str, client.ApiClient]) -> Iterator[str]:
    """The real bind API on a loopback port, offering ``API`` to the dev user."""
    with offered_api(clusters, "a-seckube"), serving(build_server(bind_api_config(stack))) as url:
        yield url


ATTACKS = ("exec", "tokenFile", "proxy-url", "http")


@pytest.mark.parametrize("attack", ATTACKS)
def test_the_bind_api_refuses_a_hostile_app_kubeconfig_before_binding(
    attack: str,
    bind_api: str,
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    attacker: Attacker,
) -> None:
    admin = Kube(clusters["control-plane"])
    text, field_path = hostile(stack, attacker)[attack]
    cluster_id = f"attacker-{uuid.uuid4().hex[:8]}"
    namespaces_before = {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]}
    token = dev_id_token(stack)
    response = httpx.post(
        f"{bind_api}/api/v1/bindings",
        headers={"Authorization": f"Bearer {token}"},
        json={
            "clusterId": cluster_id,
            "apis": [API],
            "repository": {
                "url": "https://git.example.com/team/claims.git",
                "appNamespaces": ["team-a"],
            },
            "appKubeconfig": text,
        },
        timeout=30,
    )
    if response.status_code == 201:  # the attack got through: leave nothing behind
        consumer = response.json()["consumerNamespace"]
        httpx.delete(
            f"{bind_api}/api/v1/bindings/{consumer}",
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
    assert response.status_code == 422, response.text
    (error,) = response.json()["detail"]
    assert error["loc"] == ["body", "appKubeconfig"]
    assert error["msg"].startswith(f"Value error, {field_path}: ")
    assert "(fix: " in error["msg"]
    # FastAPI would echo the whole kubeconfig (its credentials too) back as the error's input
    assert "input" not in error
    assert "certificate-authority-data" not in response.text

    time.sleep(1.0)  # an exec plugin or a connection would have happened by now
    attacker.assert_untouched()
    # only new ones count: another module's namespaces may finish terminating meanwhile
    assert {n["metadata"]["name"] for n in admin.list(NAMESPACES)[0]} - namespaces_before == set()
    # every hostile kubeconfig names the attacker's port; no Secret may hold it
    assert secrets_holding(admin, f"127.0.0.1:{attacker.port}") == []
    listed = httpx.get(
        f"{bind_api}/api/v1/bindings", headers={"Authorization": f"Bearer {token}"}, timeout=30
    ).json()["bindings"]
    assert not any(b.get("clusterId") == cluster_id for b in listed)


# -- (b) the reconciler -------------------------------------------------------------------


def secret(namespace: str, name: str, text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"kubeconfig": base64.b64encode(text.encode()).decode()},
    }


def followed_repository(git_server: GitServer, tmp_path: Path, namespace: str) -> str:
    """A repository on the HTTPS Git server with a claim for ``namespace``: with a usable
    kubeconfig the reconciler would fetch it and apply the claim through that kubeconfig."""
    url, bare = git_server.create()
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(bare), str(clone)], check=True, capture_output=True)
    (clone / "orders.yaml").write_text(claim("orders", namespace))
    for args in (
        ["checkout", "-q", "-b", "main"],
        ["add", "-A"],
        ["-c", "user.name=Tenant", "-c", "user.email=t@example.com", "commit", "-q", "-m", "db"],
        ["push", "-q", "origin", "main"],
    ):
        subprocess.run(["git", *args], cwd=clone, check=True, capture_output=True)
    return url


def secret_valid(admin: Kube, namespace: str, name: str) -> Callable[[], dict | None]:
    """The RepositoryBinding's SecretValid condition, once the reconciler has reported one."""

    def check() -> dict | None:
        status = (admin.get(REPOSITORY_BINDINGS, namespace, name) or {}).get("status") or {}
        conditions = {c["type"]: c for c in status.get("conditions") or []}
        return conditions.get("SecretValid")

    return check


def test_the_reconciler_refuses_hostile_kubeconfigs_in_repository_binding_secrets(
    namespace: Any, env: Env, attacker: Attacker
) -> None:
    """RepositoryBindings created straight on the Control Plane, as a tenant with write access to
    its consumer namespace could: each names a Secret with a hostile kubeconfig, for the App
    Cluster or for the Control Plane (where the binder kubeconfig goes)."""
    admin = Kube(env.clusters["control-plane"])
    install_crds(env.clusters["control-plane"], load_crds(cluster="control-plane"))
    consumer = namespace.name
    url = followed_repository(env.git_server, env.tmp_path, consumer)
    valid = Path(env.stack.clusters["app"].kubeconfig).read_text()
    admin.create(SECRETS, secret(consumer, "valid", valid))
    attacks = hostile(env.stack, attacker)
    cases = {  # RepositoryBinding: (App Secret, Control Plane Secret, field, which kubeconfig)
        "exec-app": ("exec", "valid", attacks["exec"][1], "App Cluster"),
        "tokenfile-binder": ("valid", "tokenFile", attacks["tokenFile"][1], "Control Plane"),
        "proxy-app": ("proxy-url", "valid", attacks["proxy-url"][1], "App Cluster"),
        "http-app": ("http", "valid", attacks["http"][1], "App Cluster"),
    }
    for attack, (text, _) in attacks.items():
        admin.create(SECRETS, secret(consumer, attack.lower(), text))
    config = env.config()
    reconciler = Reconciler(config).start(serve_http=False)
    try:
        for name, (app, control_plane, _, _) in cases.items():
            admin.create(
                REPOSITORY_BINDINGS,
                repository_binding(
                    consumer,
                    name,
                    url,
                    consumer,
                    app_ref=app.lower(),
                    binder_ref=control_plane.lower(),
                    path=None,
                ),
            )
        for name in cases:
            eventually(secret_valid(admin, consumer, name), f"SecretValid on {name}", timeout=60)
        time.sleep(2.0)  # a retried registration would have run the plugin or connected by now
        attacker.assert_untouched()
        for name, (_, _, field_path, which) in cases.items():
            condition = secret_valid(admin, consumer, name)()
            assert condition is not None
            assert condition["status"] == "False", condition
            assert condition["reason"] == "SecretInvalid"
            assert (
                f"{which} kubeconfig is not a usable kubeconfig: {field_path}: "
                in (condition["message"])
            ), condition["message"]
            assert VICTIM_TOKEN not in condition["message"]
        statuses = [b.get("status") for b in admin.list(REPOSITORY_BINDINGS, consumer)[0]]
        assert VICTIM_TOKEN not in str(statuses)
    finally:
        reconciler.stop()
        for name in cases:
            admin.delete(REPOSITORY_BINDINGS, consumer, name)
