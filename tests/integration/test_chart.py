"""charts/klutch-gitops on the real Control Plane: every value set passes a server-side dry run
under the restricted Pod Security profile (its Ingresses and PodDisruptionBudgets against the
built-in APIs, its HTTPRoutes against the Gateway API's standard CRD from its upstream release),
and the least-privilege RBAC it grants is enough for the real bind API and reconciler code to
bind, reconcile, renew a token, sync a platform repository and unbind."""

from __future__ import annotations

import base64
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from bind_api.bindings import BINDER_SECRET, BindingRequest, Repository, bind, unbind
from klutch_gitops.apis import API_SERVICE_NAMESPACES, EXPORT_REQUESTS, REPOSITORY_BINDINGS
from klutch_gitops.binder_roles import CLAIMED_SECRETS_ROLE, CONSUMER_ROLE
from klutch_gitops.config import TokenRenewal
from klutch_gitops.config_file import config_from, platform_from
from klutch_gitops.consumer import PROVIDER_SECRETS
from klutch_gitops.dev.localstack import binaries
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, KubeError, Resource, api_client
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import CRDS, NAMESPACES, ROLE_BINDINGS, ROLES, SECRETS
from reconciler.controllers.tokens import binder_user
from reconciler.manager import Reconciler
from reconciler.sync.platform import PlatformSync
from tests.conftest import TwinNamespace
from tests.env import Env
from tests.helm import VALUE_SETS, gateway_api_crd, render
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.wait import eventually

from .test_reconciler_modes import TEMPLATES

POSTGRES_API = "postgresqlinstances.anynines.com"
KLUTCH_TEMPLATES = TEMPLATES["klutch"]
BINDER_ROLES = (CONSUMER_ROLE, CLAIMED_SECRETS_ROLE)
RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
# The Prometheus Operator's CRD is not on the stack: the smallest one that lets a ServiceMonitor in.
SERVICE_MONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
        },
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def control_plane(clusters: dict[str, client.ApiClient]) -> Iterator[Kube]:
    """The Control Plane with the bind kinds, the dev claim CRDs, a ServiceMonitor CRD and the
    Gateway API's HTTPRoute CRD (as its release ships it, CEL validations included)."""
    api = clusters["control-plane"]
    install_crds(api, [*load_crds(cluster="control-plane"), *load_dev_claim_crds()])
    http_route = gateway_api_crd("httproutes")
    install_crds(api, [SERVICE_MONITOR_CRD, http_route])
    yield Kube(api)
    for crd in (SERVICE_MONITOR_CRD, http_route):
        Kube(api).delete(CRDS, None, crd["metadata"]["name"])


def kubectl(stack: StackInfo, docs: list[dict], *args: str) -> subprocess.CompletedProcess[str]:
    program = binaries.require("kubectl")["kubectl"]
    return subprocess.run(
        [str(program), "--kubeconfig", stack.clusters["control-plane"].kubeconfig, *args],
        input=yaml.safe_dump_all(docs),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def dry_run(stack: StackInfo, docs: list[dict]) -> subprocess.CompletedProcess[str]:
    return kubectl(
        stack,
        docs,
        *("apply", "--server-side", "--dry-run=server", "--field-manager=helm", "-f", "-"),
    )


def restricted(namespace: TwinNamespace) -> None:
    """Enforce (Pods) and warn about (workloads) the restricted Pod Security profile."""
    labels = {
        f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "warn", "audit")
    }
    namespace.core("control-plane").patch_namespace(
        namespace.name, {"metadata": {"labels": labels}}
    )


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_every_value_set_passes_a_server_side_dry_run(
    name: str, namespace: TwinNamespace, stack: StackInfo, control_plane: Kube
) -> None:
    restricted(namespace)
    docs = render([VALUE_SETS[name]], namespace=namespace.name)
    result = dry_run(stack, docs)
    assert result.returncode == 0, result.stderr
    assert "PodSecurity" not in result.stderr, result.stderr
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(docs), result.stdout

    # The check is live: a container that may escalate is reported.
    [deployment, *_] = [doc for doc in docs if doc["kind"] == "Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["securityContext"][
        "allowPrivilegeEscalation"
    ] = True
    result = dry_run(stack, [deployment])
    assert 'would violate PodSecurity "restricted:latest"' in result.stderr


def test_the_http_route_crd_validates_the_routes(
    namespace: TwinNamespace, stack: StackInfo, control_plane: Kube
) -> None:
    """The routes pass the CRD's schema, and the schema is live: a path without its leading
    slash is refused (the CRD's pattern on HTTPPathMatch.value)."""
    docs = render([VALUE_SETS["gateway"]], namespace=namespace.name)
    routes = [doc for doc in docs if doc["kind"] == "HTTPRoute"]
    assert len(routes) == 2
    result = dry_run(stack, routes)
    assert result.returncode == 0, result.stderr
    routes[0]["spec"]["rules"][0]["matches"][0]["path"]["value"] = "webhooks"
    result = dry_run(stack, routes[:1])
    assert result.returncode != 0
    assert "spec.rules[0].matches[0].path" in result.stderr, result.stderr


def ca_pem(stack: StackInfo) -> str:
    kubeconfig = yaml.safe_load(Path(stack.clusters["control-plane"].kubeconfig).read_text())
    return base64.b64decode(
        kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"]
    ).decode()


def identity(admin: Kube, chart_kubeconfig: str, account: dict, directory: Path) -> Kube:
    """A client that is the chart's ServiceAccount, through the kubeconfig the chart renders."""
    meta = account["metadata"]
    token = (
        client.CoreV1Api(admin.api)
        .create_namespaced_service_account_token(
            meta["name"],
            meta["namespace"],
            client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
        )
        .status.token
    )
    directory.mkdir()
    (directory / "token").write_text(token)
    kubeconfig = yaml.safe_load(chart_kubeconfig)
    kubeconfig["users"][0]["user"]["tokenFile"] = "token"  # the Pod's is the projected token
    (directory / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    return Kube(api_client(directory / "kubeconfig"))


def by_component(docs: list[dict], kind: str, component: str) -> dict:
    [found] = [
        doc
        for doc in docs
        if doc["kind"] == kind
        and doc["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return found


@pytest.fixture
def offered(control_plane: Kube) -> Iterator[str]:
    """A namespace with a template offering PostgreSQL."""
    name = f"templates-{uuid.uuid4().hex[:6]}"
    control_plane.create(NAMESPACES, {"metadata": {"name": name}})
    control_plane.create(KLUTCH_TEMPLATES, template(name, "postgresqlinstances"))
    yield name
    control_plane.delete(NAMESPACES, None, name)


def template(namespace: str, resource: str) -> dict[str, Any]:
    return {
        "apiVersion": KLUTCH_TEMPLATES.api_version,
        "kind": "APIServiceExportTemplate",
        "metadata": {"name": resource, "namespace": namespace},
        "spec": {
            "APIServiceSelector": {"group": "anynines.com", "resource": resource},
            "permissionClaims": [PROVIDER_SECRETS],
        },
    }


def bare_repo(
    tmp_path: Path, name: str, files: dict[str, str], root: Path | None = None
) -> tuple[Path, Path]:
    """A bare repository (in ``root``, say a Git server's, else ``tmp_path``) and its clone."""
    remote, clone = (root or tmp_path) / f"{name}-{uuid.uuid4().hex[:6]}.git", tmp_path / name
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(["git", "clone", "-q", str(remote), str(clone)], check=True, capture_output=True)
    git(clone, "config", "user.name", "Platform Team")
    git(clone, "config", "user.email", "platform@example.com")
    git(clone, "checkout", "-q", "-b", "main")
    for path, text in files.items():
        (clone / path).parent.mkdir(parents=True, exist_ok=True)
        (clone / path).write_text(text)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "files")
    git(clone, "push", "-q", "origin", "main")
    return remote, clone


def role(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [],
    }


def forbidden(call: Callable[[], object]) -> bool:
    try:
        call()
    except KubeError as error:
        return error.status == 403
    except client.ApiException as error:
        return error.status == 403
    return False


def local_values(stack: StackInfo, tmp_path: Path, **extra: Any) -> Path:
    """A values file pointing the chart at the local Control Plane, plus ``extra`` values."""
    local = tmp_path / "control-plane-values.yaml"
    control_plane = {
        "server": stack.clusters["control-plane"].url,
        "certificateAuthority": ca_pem(stack),
    }
    local.write_text(yaml.safe_dump({"controlPlane": control_plane, **extra}))
    return local


def binder_token(kube: Kube, namespace: str) -> str:
    secret = kube.get(SECRETS, namespace, BINDER_SECRET)
    assert secret is not None
    return binder_user(secret)[1]["token"]


def test_the_charts_rbac_is_enough_for_the_real_services(
    namespace: TwinNamespace, env: Env, control_plane: Kube, offered: str
) -> None:
    release = f"rbac-{uuid.uuid4().hex[:6]}"
    local = local_values(
        env.stack,
        env.tmp_path,
        reconciler={"config": {"platform": {"url": "file:///srv/platform.git"}}},
    )
    docs = render([VALUE_SETS["default"], local], namespace=namespace.name, release=release)
    rbac = [doc for doc in docs if doc["kind"] in RBAC_KINDS]
    applied = kubectl(env.stack, rbac, "apply", "--server-side", "--field-manager=helm", "-f", "-")
    assert applied.returncode == 0, applied.stderr
    admin = control_plane
    app = Kube(env.clusters["app"])
    team = f"team-{uuid.uuid4().hex[:6]}"
    app.create(NAMESPACES, {"metadata": {"name": team}})
    reconciler = None
    try:
        chart_kubeconfig = by_component(docs, "ConfigMap", "kubeconfig")["data"]["kubeconfig"]
        as_bind_api, as_reconciler = (
            identity(
                admin,
                chart_kubeconfig,
                by_component(docs, "ServiceAccount", component),
                env.tmp_path / component,
            )
            for component in ("bind-api", "reconciler")
        )

        # The bind API binds: consumer namespace, ServiceAccount, Role, exports, Secrets,
        # ClusterBinding and RepositoryBinding.
        remote, _ = bare_repo(
            env.tmp_path, "team", {"claims/orders.yaml": claim("orders", team)}, env.git_server.root
        )
        result = bind(
            as_bind_api,
            BindingRequest(
                identity=f"dev-{uuid.uuid4().hex[:6]}",
                cluster_id="app-1",
                apis=(POSTGRES_API,),
                repository=Repository(
                    url=env.git_server.url_of(remote), app_namespaces=(team,), path="claims"
                ),
                app_kubeconfig=Path(env.stack.clusters["app"].kubeconfig).read_text(),
                groups=("team-a",),
                default_allowed_groups=("team-a",),
            ),
            template_namespace=offered,
        )
        consumer = result.consumer_namespace
        assert result.exports == (POSTGRES_API,)
        issued = binder_token(admin, consumer)
        # ...and no more than that: it cannot read Secrets, nor make Roles of other names.
        assert forbidden(lambda: as_bind_api.get(SECRETS, consumer, BINDER_SECRET))
        assert forbidden(lambda: as_bind_api.apply(ROLES, role(consumer, "other")))

        # The reconciler installs its CRDs, follows the RepositoryBinding, answers the namespace
        # mapping (a Role only a holder of the claim kinds may grant), renews the binder token
        # (due at once with these settings) and reports the binding's status.
        config = config_from(
            env.tmp_path / "reconciler" / "kubeconfig",
            listen=f"127.0.0.1:{free_port()}",
            poll_interval=1.0,
            batch_window=0.3,
            workers=2,
            work_dir=env.tmp_path / "work",
            binder_tokens=TokenRenewal(lifetime=48 * 3600.0, renew_before=25 * 3600.0),
        )
        reconciler = Reconciler(config).start(serve_http=False)
        # Its export request controller answers the request kubectl-bind makes with the binder
        # kubeconfig (the bind API's own of that name exists, so the CLI generates one).
        made = Kube(api_client(result.kubeconfig)).create(
            EXPORT_REQUESTS,
            {
                "apiVersion": EXPORT_REQUESTS.api_version,
                "kind": "APIServiceExportRequest",
                "metadata": {"namespace": consumer, "generateName": f"{POSTGRES_API}-"},
                "spec": {
                    "resources": [
                        {"group": "anynines.com", "resource": "postgresqlinstances", "versions": []}
                    ]
                },
            },
        )
        answered = eventually(
            lambda: (
                (admin.get(EXPORT_REQUESTS, consumer, made["metadata"]["name"]) or {})
                .get("status", {})
                .get("phase")
            ),
            "the CLI-made export request's phase",
        )
        assert answered == "Succeeded"
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
        # Each identity bound its one binder ClusterRole (the bind verb): the binder reads its own
        # Secrets and updates an existing one in its mapped namespace, as Klutch's konnector does.
        binder = Kube(api_client(result.kubeconfig))
        assert binder.get(SECRETS, consumer, BINDER_SECRET) is not None
        admin.create(SECRETS, {"metadata": {"name": "orders-conn", "namespace": mapped}})
        provided = admin.get(SECRETS, mapped, "orders-conn")
        provided["metadata"]["annotations"] = {"klutch.anynines.com/resource-owner": "Provider"}
        assert binder.replace(SECRETS, provided)["metadata"]["annotations"]
        for namespace, name in ((consumer, CONSUMER_ROLE), (mapped, CLAIMED_SECRETS_ROLE)):
            assert admin.get(ROLE_BINDINGS, namespace, name)["roleRef"]["name"] == name
        eventually(lambda: binder_token(admin, consumer) != issued, "the renewed binder token")
        ready = eventually(
            lambda: [
                c
                for c in (
                    admin.get(REPOSITORY_BINDINGS, consumer, result.repository_binding or "") or {}
                )
                .get("status", {})
                .get("conditions", [])
                if c["type"] == "Ready" and c["status"] == "True"
            ],
            "the RepositoryBinding's Ready status",
        )
        assert ready

        # The platform repository: a template applied, then pruned when it leaves Git.
        platform_remote, platform_clone = bare_repo(
            env.tmp_path,
            "platform",
            {"templates/mongodb.yaml": yaml.safe_dump(template(offered, "mongodbinstances"))},
        )
        platform = PlatformSync(
            platform_from(f"file://{platform_remote}"),
            as_reconciler,
            env.tmp_path / "platform-checkout",
            None,
        )
        synced = platform.sync()
        assert (synced.applied, synced.rejections) == (1, [])
        assert admin.get(KLUTCH_TEMPLATES, offered, "mongodbinstances") is not None
        git(platform_clone, "rm", "-q", "templates/mongodb.yaml")
        git(platform_clone, "commit", "-q", "-m", "retire")
        git(platform_clone, "push", "-q", "origin", "main")
        platform.needs_fetch = True
        assert platform.sync().pruned == 1
        assert admin.get(KLUTCH_TEMPLATES, offered, "mongodbinstances") is None

        # Its identity cannot write Secrets other than binder kubeconfigs, nor other Roles.
        secret = admin.get(SECRETS, consumer, f"{result.repository_binding}-app-kubeconfig")
        assert forbidden(
            lambda: client.CoreV1Api(as_reconciler.api).replace_namespaced_secret(
                secret["metadata"]["name"], consumer, secret
            )
        )
        assert forbidden(lambda: as_reconciler.apply(ROLES, role(mapped, "other")))
        claimed = admin.get(SECRETS, mapped, "orders-conn")
        assert forbidden(lambda: as_reconciler.replace(SECRETS, claimed))

        # The bind API unbinds; the reconciler's controller deletes the mapped namespace.
        unbind(as_bind_api, consumer)
        assert admin.get(NAMESPACES, None, consumer) is None
        assert admin.get(NAMESPACES, None, mapped) is None
    finally:
        if reconciler is not None:
            reconciler.stop()
        app.delete(NAMESPACES, None, team)
        for doc in rbac:  # the binder's ClusterRoles have fixed names, shared with other tests
            if doc["kind"].startswith("Cluster") and doc["metadata"]["name"] not in BINDER_ROLES:
                kind = Resource(
                    "rbac.authorization.k8s.io",
                    "v1",
                    f"{doc['kind'].lower()}s",
                    doc["kind"],
                    namespaced=False,
                )
                admin.delete(kind, None, doc["metadata"]["name"])
