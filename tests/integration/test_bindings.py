"""Bindings against real clusters: idempotent binding, failed exports, tenant isolation with real
RBAC, a RepositoryBinding the reconciler follows, and unbinding."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from bind_api.bindings import BINDER_SECRET, BindingRequest, BindingResult, Repository, bind, unbind
from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    CLUSTER_BINDINGS,
    EXPORT_REQUESTS,
    REPOSITORY_BINDINGS,
)
from klutch_gitops.consumer import PROVIDER_SECRETS
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import FAILED, SUCCEEDED
from klutch_gitops.kube.client import Kube, KubeError, api_client
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds, version_snapshot
from klutch_gitops.kube.resources import CRDS, NAMESPACES, SECRETS
from reconciler.controllers.namespaces import NamespaceController
from reconciler.manager import Reconciler
from tests.env import Env
from tests.gitserver import GitServer
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.wait import eventually

from .test_reconciler_modes import TEMPLATES

POSTGRES_API = "postgresqlinstances.anynines.com"


@pytest.fixture
def admin(clusters: dict[str, client.ApiClient]) -> Kube:
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    return Kube(clusters["control-plane"])


@pytest.fixture
def offered(admin: Kube) -> Iterator[str]:
    """A namespace with templates: PostgreSQL (Klutch's group) and an API without a CRD (ours)."""
    namespace = f"templates-{uuid.uuid4().hex[:6]}"
    admin.create(NAMESPACES, {"metadata": {"name": namespace}})
    for group, resource, api_group in (
        ("example-backend", "postgresqlinstances", "anynines.com"),
        ("klutch", "widgets", "missing.example.com"),
    ):
        body = {
            "apiVersion": TEMPLATES[group].api_version,
            "kind": "APIServiceExportTemplate",
            "metadata": {"name": resource, "namespace": namespace},
            "spec": {
                "APIServiceSelector": {"group": api_group, "resource": resource},
                "permissionClaims": [PROVIDER_SECRETS],
            },
        }
        admin.create(TEMPLATES[group], body)
    yield namespace
    admin.delete(NAMESPACES, None, namespace)


@pytest.fixture
def consumers(admin: Kube) -> Iterator[list[str]]:
    """Consumer namespaces to unbind after the test."""
    made: list[str] = []
    yield made
    for namespace in made:
        unbind(admin, namespace)


def request(apis: tuple[str, ...] = (POSTGRES_API,), **extra: Any) -> BindingRequest:
    return BindingRequest(
        identity=f"dev-{uuid.uuid4().hex[:6]}", cluster_id="app-1", apis=apis, **extra
    )


def test_binding_twice_gives_the_same_objects(
    admin: Kube, offered: str, consumers: list[str]
) -> None:
    wanted = request(
        repository=Repository(
            url="https://git.example.com/team.git", app_namespaces=("team",), path="claims"
        ),
        app_kubeconfig="apiVersion: v1\nkind: Config\n",
    )
    first = bind(admin, wanted, template_namespace=offered)
    consumers.append(first.consumer_namespace)
    ns = first.consumer_namespace
    assert first.phases == {POSTGRES_API: SUCCEEDED}
    assert first.exports == (POSTGRES_API,)
    binding = admin.get(REPOSITORY_BINDINGS, ns, first.repository_binding or "")
    assert binding is not None
    objects = (
        (REPOSITORY_BINDINGS, first.repository_binding),
        (EXPORT_REQUESTS, POSTGRES_API),
        (API_SERVICE_EXPORTS, POSTGRES_API),
        (CLUSTER_BINDINGS, "cluster"),
    )
    versions = [admin.get(r, ns, name)["metadata"]["resourceVersion"] for r, name in objects]

    second = bind(admin, wanted, template_namespace=offered)
    assert second.consumer_namespace == ns
    assert second.repository_binding == first.repository_binding
    again = [admin.get(r, ns, name)["metadata"]["resourceVersion"] for r, name in objects]
    assert again == versions, "binding again changed an object"

    namespace = admin.get(NAMESPACES, None, ns)
    assert namespace["metadata"]["annotations"]["example-backend.klutch.anynines.com/identity"] == (
        f"{wanted.identity}#app-1"
    )
    assert admin.get(EXPORT_REQUESTS, ns, POSTGRES_API)["status"]["phase"] == SUCCEEDED
    export = admin.get(API_SERVICE_EXPORTS, ns, POSTGRES_API)["spec"]
    crd = admin.get(CRDS, None, POSTGRES_API)["spec"]
    assert export["names"]["kind"] == crd["names"]["kind"]
    assert export["versions"] == [version_snapshot(v) for v in crd["versions"]]
    assert export["permissionClaims"] == [PROVIDER_SECRETS]
    cluster = admin.get(CLUSTER_BINDINGS, ns, "cluster")["spec"]
    assert cluster["kubeconfigSecretRef"]["name"] == BINDER_SECRET
    assert yaml.safe_load(second.kubeconfig)["contexts"][0]["context"]["namespace"] == ns
    assert binding["spec"]["controlPlane"]["kubeconfigSecretRef"]["name"] == BINDER_SECRET
    for ref in (binding["spec"]["appCluster"], binding["spec"]["controlPlane"]):
        assert admin.get(SECRETS, ns, ref["kubeconfigSecretRef"]["name"]) is not None


def test_a_template_without_crd_fails_the_request_and_exports_nothing(
    admin: Kube, offered: str, consumers: list[str]
) -> None:
    result = bind(admin, request(("widgets.missing.example.com",)), template_namespace=offered)
    consumers.append(result.consumer_namespace)
    assert result.phases == {"widgets.missing.example.com": FAILED}
    assert result.exports == ()
    status = admin.get(EXPORT_REQUESTS, result.consumer_namespace, "widgets.missing.example.com")[
        "status"
    ]
    assert status["phase"] == FAILED
    assert "widgets.missing.example.com does not exist" in status["terminalMessage"]
    exports, _ = admin.list(API_SERVICE_EXPORTS, result.consumer_namespace)
    assert exports == []


def forbidden(call: Callable[[], Any]) -> bool:
    try:
        call()
    except KubeError as error:
        return error.status == 403
    return False


def test_a_binder_cannot_reach_other_tenants_namespaces_or_secrets(
    admin: Kube, offered: str, consumers: list[str]
) -> None:
    a = bind(admin, request(), template_namespace=offered)
    b = bind(admin, request(), template_namespace=offered)
    consumers += [a.consumer_namespace, b.consumer_namespace]
    assert a.consumer_namespace != b.consumer_namespace
    as_a = Kube(api_client(a.kubeconfig))
    other, own = b.consumer_namespace, a.consumer_namespace

    assert [e["metadata"]["name"] for e in as_a.list(API_SERVICE_EXPORTS, own)[0]] == [POSTGRES_API]
    mapping = {
        "apiVersion": API_SERVICE_NAMESPACES.api_version,
        "kind": "APIServiceNamespace",
        "metadata": {"name": "intruder", "namespace": other},
    }
    assert forbidden(lambda: as_a.list(API_SERVICE_EXPORTS, other))
    assert forbidden(lambda: as_a.get(API_SERVICE_EXPORTS, other, POSTGRES_API))
    assert forbidden(lambda: as_a.create(API_SERVICE_NAMESPACES, mapping))
    assert forbidden(lambda: as_a.create(NAMESPACES, {"metadata": {"name": f"{own}-x"}}))
    assert forbidden(lambda: as_a.get(SECRETS, other, BINDER_SECRET))
    assert forbidden(lambda: as_a.list(SECRETS, other))
    # Its own Secrets it reads, as Klutch's binder (the konnector's informer), never writes:
    # tests/security/test_binder_requests.py.
    assert as_a.get(SECRETS, own, BINDER_SECRET) is not None
    assert forbidden(lambda: as_a.delete(SECRETS, own, BINDER_SECRET))


def bare_repo(tmp_path: Path, files: dict[str, str], root: Path | None = None) -> Path:
    """A bare repository (in ``root``, say a Git server's, else ``tmp_path``) with ``files``."""
    remote, clone = (root or tmp_path) / f"team-{uuid.uuid4().hex[:6]}.git", tmp_path / "human"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    git(clone, "config", "user.name", "Human Developer")
    git(clone, "config", "user.email", "human@example.com")
    git(clone, "checkout", "-q", "-b", "main")
    for name, text in files.items():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "claims")
    git(clone, "push", "-q", "origin", "main")
    return remote


def bind_repository(
    admin: Kube, offered: str, stack: StackInfo, app: Kube, tmp_path: Path, server: GitServer
) -> tuple[str, BindingResult]:
    """A new App namespace, a repository on the HTTPS Git server with one claim for it, and a
    binding that registers it."""
    team = f"team-{uuid.uuid4().hex[:6]}"
    app.create(NAMESPACES, {"metadata": {"name": team}})
    remote = bare_repo(tmp_path, {"claims/orders.yaml": claim("orders", team)}, server.root)
    result = bind(
        admin,
        request(
            repository=Repository(url=server.url_of(remote), app_namespaces=(team,), path="claims"),
            app_kubeconfig=Path(stack.clusters["app"].kubeconfig).read_text(),
        ),
        template_namespace=offered,
    )
    return team, result


def test_the_reconciler_follows_a_binding_until_unbound(
    admin: Kube, offered: str, env: Env
) -> None:
    app = Kube(env.clusters["app"])
    team, result = bind_repository(admin, offered, env.stack, app, env.tmp_path, env.git_server)
    consumer = result.consumer_namespace
    config = env.config()
    reconciler = Reconciler(config).start(serve_http=False)
    try:
        eventually(lambda: app.get(POSTGRES, team, "orders"), "the claim in the App namespace")
        mapped = eventually(
            lambda: (
                (admin.get(API_SERVICE_NAMESPACES, consumer, team) or {})
                .get("status", {})
                .get("namespace")
            ),
            "the namespace mapping",
        )
        eventually(lambda: admin.get(POSTGRES, mapped, "orders"), "the claim on the Control Plane")

        unbind(admin, consumer)
        assert admin.get(NAMESPACES, None, consumer) is None
        assert admin.get(NAMESPACES, None, mapped) is None
        eventually(
            lambda: f"{consumer}.{result.repository_binding}" not in reconciler.syncs,
            "the reconciler to drop the repository",
        )
    finally:
        reconciler.stop()
        app.delete(NAMESPACES, None, team)


def test_unbind_removes_the_consumer_and_mapped_namespaces(
    admin: Kube, offered: str, clusters: dict[str, client.ApiClient]
) -> None:
    result = bind(admin, request(), template_namespace=offered)
    consumer = result.consumer_namespace
    controller = NamespaceController(Kube(clusters["control-plane"])).start()
    try:
        Kube(api_client(result.kubeconfig)).create(
            API_SERVICE_NAMESPACES,
            {
                "apiVersion": API_SERVICE_NAMESPACES.api_version,
                "kind": "APIServiceNamespace",
                "metadata": {"name": "shop", "namespace": consumer},
            },
        )
        mapped = eventually(
            lambda: (
                (admin.get(API_SERVICE_NAMESPACES, consumer, "shop") or {})
                .get("status", {})
                .get("namespace")
            ),
            "the mapped namespace",
        )
        assert admin.get(NAMESPACES, None, mapped) is not None

        unbind(admin, consumer)
        assert admin.get(NAMESPACES, None, consumer) is None
        assert admin.get(NAMESPACES, None, mapped) is None
        unbind(admin, consumer)  # already gone: nothing to do
    finally:
        controller.stop()


def test_unbind_refuses_a_namespace_that_is_not_a_consumers(admin: Kube, offered: str) -> None:
    with pytest.raises(KlutchError, match="not a consumer's"):
        unbind(admin, offered)
    assert admin.get(NAMESPACES, None, offered) is not None
