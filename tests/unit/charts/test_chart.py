"""charts/klutch-gitops: helm lint, helm template with every value set, and what the output must
hold: the restricted Pod Security profile, probes, RBAC without wildcards, configs the services
accept, the catalog's CRDs, and values the schema refuses."""

from __future__ import annotations

import base64
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bind_api.config import parse_bind_api_config
from klutch_gitops.binder_roles import CLAIMED_SECRETS_ROLE, CONSUMER_ROLE
from klutch_gitops.config_file import parse_config
from klutch_gitops.kube.client import _token_file
from klutch_gitops.kube.crds import CRD_DIR, load_crds
from klutch_gitops.policies import load_policies
from tests.helm import CHART, VALUE_SETS, helm, render, template

ROOT = CHART.parents[1]
SETS = sorted(VALUE_SETS)
CONFIG_DIR = Path("/etc/klutch-gitops/config")


def objects(docs: list[dict], kind: str) -> list[dict]:
    return [doc for doc in docs if doc["kind"] == kind]


BINDER_ROLES = (CONSUMER_ROLE, CLAIMED_SECRETS_ROLE)


def one(docs: list[dict], kind: str, component: str) -> dict:
    [found] = [
        doc
        for doc in objects(docs, kind)
        if doc["metadata"]["labels"]["app.kubernetes.io/component"] == component
    ]
    return found


@pytest.fixture(scope="module", params=SETS)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[dict]]:
    return request.param, render([VALUE_SETS[request.param]])


def test_the_value_sets_cover_every_kind_of_install() -> None:
    assert set(SETS) == {
        "default",
        "tls",
        "monitoring",
        "replicas",
        "shards",
        "openshift",
        "ingress",
        "gateway",
        "scheduling",
        "no-rbac",
    }


@pytest.mark.parametrize("name", SETS)
def test_helm_lint_passes_strictly(name: str) -> None:
    result = helm("lint", "--strict", str(CHART), "--values", str(VALUE_SETS[name]))
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_object_is_named_labelled_and_in_the_release_namespace(
    rendered: tuple[str, list[dict]],
) -> None:
    _, docs = rendered
    cluster_scoped = {
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "CustomResourceDefinition",
    }
    for doc in docs:
        meta = doc["metadata"]
        label = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
        # A CRD is named <plural>.<group>, a DNS subdomain; every other name is one label.
        name = rf"{label}(\.{label})*" if doc["kind"] == "CustomResourceDefinition" else label
        assert re.fullmatch(name, meta["name"]), meta["name"]
        assert len(meta["name"]) <= 63
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "Helm"
        assert meta.get("namespace") == (None if doc["kind"] in cluster_scoped else "klutch")


def test_every_container_runs_with_the_restricted_profile(
    rendered: tuple[str, list[dict]],
) -> None:
    _, docs = rendered
    deployments = objects(docs, "Deployment")
    assert {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in deployments} == {
        "reconciler",
        "bind-api",
    }
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        # OpenShift's restricted-v2 assigns the UID: ci/openshift-values.yaml names none.
        assert pod["securityContext"].get("runAsUser", 1) > 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not any(pod.get(host) for host in ("hostNetwork", "hostPID", "hostIPC"))
        assert all("hostPath" not in volume for volume in pod["volumes"])
        containers = pod["containers"] + pod.get("initContainers", [])
        for container in containers:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["readOnlyRootFilesystem"] is True
            assert context["runAsNonRoot"] is True
            assert not context.get("privileged")
            # Everything it writes goes to emptyDirs.
            writable = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
            empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
            assert {
                m["name"] for m in container["volumeMounts"] if m["mountPath"] in writable
            } <= empty_dirs
            assert "/tmp" in writable  # noqa: S108 - the Pod's own emptyDir


def test_probes_use_healthz_and_readyz(rendered: tuple[str, list[dict]]) -> None:
    _, docs = rendered
    reconciler = one(docs, "Deployment", "reconciler")["spec"]["template"]["spec"]
    [container] = reconciler["containers"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    bind_api = one(docs, "Deployment", "bind-api")["spec"]["template"]["spec"]
    [container] = bind_api["containers"]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz"  # it has no /readyz


def test_rbac_names_every_verb_and_resource(rendered: tuple[str, list[dict]]) -> None:
    name, docs = rendered
    roles = objects(docs, "ClusterRole") + objects(docs, "Role")
    leases = 1 if name in ("replicas", "shards", "scheduling") else 0  # the Leases' Role
    sessions = 1 if name in ("replicas", "tls") else 0  # the browser flow's used sessions' Role
    binder = 2  # klutch-binder-consumer and klutch-binder-claimed-secrets (catalog/rbac)
    aggregated = 2  # klutch-gitops-repositorybindings-view and -edit (repositorybinding-roles.yaml)
    expected = 0 if name == "no-rbac" else 2 + binder + leases + sessions + aggregated
    assert len(roles) == expected
    for role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs"):
                assert rule[key], f"{role['metadata']['name']}: empty {key} in {rule}"
                assert not any("*" in item for item in rule[key]), (role["metadata"], rule)
            assert not {"escalate", "impersonate"} & set(rule["verbs"])
            if "bind" in rule["verbs"]:  # only the binder's ClusterRoles, by name
                assert rule["resources"] == ["clusterroles"], rule
                assert set(rule["resourceNames"]) <= set(BINDER_ROLES), rule
            assert "nonResourceURLs" not in rule
    bindings = objects(docs, "ClusterRoleBinding") + objects(docs, "RoleBinding")
    service_accounts = {sa["metadata"]["name"] for sa in objects(docs, "ServiceAccount")}
    for binding in bindings:
        [subject] = binding["subjects"]
        assert subject["kind"] == "ServiceAccount"
        assert subject["name"] in service_accounts
        assert binding["roleRef"]["name"] in {r["metadata"]["name"] for r in roles}
    for sa in objects(docs, "ServiceAccount"):
        assert sa["automountServiceAccountToken"] is False  # the Pods mount it, nothing else


def test_the_reconciler_may_grant_what_the_catalogs_exports_need() -> None:
    """Its namespace controller grants the claim kinds; RBAC lets only a holder grant."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    [granted] = values["reconciler"]["rbac"]["exportedResources"]
    claims = {
        yaml.safe_load(path.read_text())["spec"]["claimNames"]["plural"]
        for path in (ROOT / "catalog" / "xrds").glob("*.yaml")
    }
    assert granted["apiGroup"] == "anynines.com"
    assert set(granted["resources"]) == claims


def test_pinned_names_match_the_code() -> None:
    from bind_api.bindings import BINDER_SECRET
    from klutch_gitops.apis import BINDER

    docs = render([VALUE_SETS["default"]])
    rules = [rule for role in objects(docs, "ClusterRole") for rule in role["rules"]]
    pinned = {name for rule in rules for name in rule.get("resourceNames", [])}
    crds = {crd["metadata"]["name"] for crd in load_crds(cluster="control-plane")}
    policies = {policy["metadata"]["name"] for policy in load_policies()}
    assert pinned == {BINDER, BINDER_SECRET, *BINDER_ROLES} | crds | policies


def test_only_a_platform_repository_brings_the_platform_kinds() -> None:
    def groups(docs: list[dict]) -> set[str]:
        reconciler = one(docs, "ClusterRole", "reconciler")
        return {group for rule in reconciler["rules"] for group in rule["apiGroups"]}

    assert "apiextensions.crossplane.io" not in groups(render([VALUE_SETS["default"]]))
    assert "apiextensions.crossplane.io" in groups(render([VALUE_SETS["tls"]]))


def test_the_charts_crds_are_the_catalogs_control_plane_crds() -> None:
    """Helm reads only files inside the chart, so files/crds/ holds copies: kept byte-identical
    here; templates/crds.yaml renders each of them."""
    wanted = {
        path.name
        for path in CRD_DIR.glob("*.yaml")
        if yaml.safe_load(path.read_text())["metadata"]["name"]
        in {crd["metadata"]["name"] for crd in load_crds(cluster="control-plane")}
    }
    shipped = {path.name for path in (CHART / "files" / "crds").iterdir()}
    assert shipped == wanted, "charts/klutch-gitops/files/crds/ must hold the Control Plane CRDs"
    for name in sorted(wanted):
        assert (CHART / "files" / "crds" / name).read_bytes() == (CRD_DIR / name).read_bytes(), (
            f"charts/klutch-gitops/files/crds/{name} differs from catalog/crds/{name}: "
            f"cp catalog/crds/{name} charts/klutch-gitops/files/crds/"
        )
    assert not (CHART / "crds").exists(), "crds/ is never upgraded by Helm: use files/crds/"
    rendered = objects(render([VALUE_SETS["default"]]), "CustomResourceDefinition")
    assert len(rendered) == len(wanted)


def config_files(docs: list[dict], component: str) -> dict[str, str]:
    return one(docs, "ConfigMap", component)["data"]


def test_the_rendered_configs_are_accepted_by_the_services(
    rendered: tuple[str, list[dict]],
) -> None:
    _, docs = rendered
    text = config_files(docs, "reconciler")["reconciler.yaml"]
    config = parse_config(text, "reconciler.yaml", CONFIG_DIR)
    assert config.control_plane_kubeconfig == Path("/etc/klutch-gitops/kubeconfig/kubeconfig")
    assert config.listen == "0.0.0.0:8080"
    assert config.work_dir == Path("/var/lib/klutch-gitops/repos")
    bind_api = parse_bind_api_config(
        config_files(docs, "bind-api")["bind-api.yaml"], "bind-api.yaml", CONFIG_DIR
    )
    assert bind_api.listen == "0.0.0.0:8443"
    assert bind_api.issuer == "https://dex.example.com"
    deployment = one(docs, "Deployment", "bind-api")["spec"]["template"]["spec"]
    mounts = {m["name"]: m["mountPath"] for m in deployment["containers"][0]["volumeMounts"]}
    assert bind_api.control_plane_kubeconfig.parent == Path(mounts["kubeconfig"])
    if bind_api.tls_cert:
        assert bind_api.tls_cert.parent == Path(mounts["tls"])
    if bind_api.browser:
        assert bind_api.browser.client_secret.file.parent == Path(mounts["browser"])


def test_the_kubeconfig_is_the_service_accounts_rotated_token(
    rendered: tuple[str, list[dict]],
) -> None:
    _, docs = rendered
    kubeconfig = yaml.safe_load(config_files(docs, "kubeconfig")["kubeconfig"])
    assert _token_file(kubeconfig, None) == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    for deployment in objects(docs, "Deployment"):
        assert deployment["spec"]["template"]["spec"]["automountServiceAccountToken"] is True


def test_defaults_reach_the_control_plane_in_cluster() -> None:
    docs = render([VALUE_SETS["default"]])
    kubeconfig = yaml.safe_load(config_files(docs, "kubeconfig")["kubeconfig"])
    [cluster] = kubeconfig["clusters"]
    assert cluster["cluster"] == {
        "server": "https://kubernetes.default.svc",
        "certificate-authority": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    }
    assert not objects(docs, "ServiceMonitor")
    assert not objects(docs, "NetworkPolicy")
    assert not objects(docs, "Secret")  # no browser flow, no secret of ours


def test_tls_browser_flow_and_an_external_control_plane() -> None:
    docs = render([VALUE_SETS["tls"]])
    kubeconfig = yaml.safe_load(config_files(docs, "kubeconfig")["kubeconfig"])
    [cluster] = kubeconfig["clusters"]
    assert cluster["cluster"]["server"] == "https://control-plane.example.com:6443"
    ca = base64.b64decode(cluster["cluster"]["certificate-authority-data"]).decode()
    assert ca.startswith("-----BEGIN CERTIFICATE-----")
    pod = one(docs, "Deployment", "bind-api")["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "bind-api-tls"
    [secret] = objects(docs, "Secret")
    assert volumes["browser"]["secret"]["secretName"] == secret["metadata"]["name"]
    assert set(secret["data"]) == {"clientSecret", "sessionKey"}
    config = parse_bind_api_config(
        config_files(docs, "bind-api")["bind-api.yaml"], "bind-api.yaml", CONFIG_DIR
    )
    assert config.browser is not None
    [sessions] = [r for r in objects(docs, "Role") if r["metadata"]["name"].endswith("-sessions")]
    # Used browser sessions are Leases in the bind API's own namespace, and nowhere else.
    assert config.browser.session_namespace == sessions["metadata"]["namespace"]
    assert sessions["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["create", "list", "delete"],
        }
    ]
    assert config.bindings_per_identity == 50
    assert one(docs, "Service", "bind-api")["spec"]["ports"][0]["targetPort"] == "https"
    [reconciler] = one(docs, "Deployment", "reconciler")["spec"]["template"]["spec"]["containers"]
    env = {e["name"] for e in reconciler["env"]}
    assert "PLATFORM_GIT_TOKEN" in env


def test_service_monitors_and_network_policies() -> None:
    docs = render([VALUE_SETS["monitoring"]])
    monitors = {
        m["metadata"]["labels"]["app.kubernetes.io/component"]: m
        for m in objects(docs, "ServiceMonitor")
    }
    assert set(monitors) == {"reconciler", "bind-api"}
    for component, monitor in monitors.items():
        [endpoint] = monitor["spec"]["endpoints"]
        service = one(docs, "Service", component)
        assert endpoint["port"] == service["spec"]["ports"][0]["name"]
        assert endpoint["path"] == "/metrics"
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        assert (
            monitor["spec"]["selector"]["matchLabels"].items()
            <= service["spec"]["selector"].items()
        )
    assert monitors["bind-api"]["spec"]["endpoints"][0]["tlsConfig"]["ca"]["secret"]["name"] == (
        "bind-api-ca"
    )
    policies = objects(docs, "NetworkPolicy")
    assert len(policies) == 2
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
        component = policy["metadata"]["labels"]["app.kubernetes.io/component"]
        pod = one(docs, "Deployment", component)["spec"]["template"]
        assert (
            policy["spec"]["podSelector"]["matchLabels"].items()
            <= pod["metadata"]["labels"].items()
        )
        [ingress] = policy["spec"]["ingress"]
        assert [p["port"] for p in ingress["ports"]] == [
            pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        ]
        assert len(ingress["from"]) == 2
        egress_ports = {
            (p["port"], p["protocol"]) for r in policy["spec"]["egress"] for p in r["ports"]
        }
        assert {(53, "UDP"), (53, "TCP"), (443, "TCP")} <= egress_ports


def test_bind_apis_and_leader_electing_reconcilers_scale_out() -> None:
    docs = render([VALUE_SETS["replicas"]])
    bind_api = one(docs, "Deployment", "bind-api")
    assert bind_api["spec"]["replicas"] == 2
    volumes = {v["name"]: v for v in bind_api["spec"]["template"]["spec"]["volumes"]}
    assert volumes["browser"]["secret"]["secretName"] == "bind-api-browser"  # shared key
    reconciler = one(docs, "Deployment", "reconciler")
    assert reconciler["spec"]["replicas"] == 2
    # Standbys are never Ready: a rollout must not wait for them before replacing old Pods.
    assert reconciler["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": "100%"},
    }
    [container] = reconciler["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # Webhooks reach only the leader, the one Ready Pod.
    assert one(docs, "Service", "reconciler")["spec"]["publishNotReadyAddresses"] is False
    config = parse_config(
        config_files(docs, "reconciler")["reconciler.yaml"], "reconciler.yaml", CONFIG_DIR
    )
    election = config.leader_election
    assert election.enabled
    assert election.namespace == "klutch"
    [role] = [r for r in objects(docs, "Role") if r["metadata"]["name"].endswith("-reconciler")]
    assert role["metadata"]["namespace"] == "klutch"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "update"],
            "resourceNames": [election.name],
        },
    ]
    [binding] = [
        b for b in objects(docs, "RoleBinding") if b["metadata"]["name"] == role["metadata"]["name"]
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    [subject] = binding["subjects"]
    assert subject["name"] == reconciler["spec"]["template"]["spec"]["serviceAccountName"]


def test_sharded_reconcilers_are_all_ready_and_may_name_their_leases() -> None:
    docs = render([VALUE_SETS["shards"]])
    assert one(docs, "Deployment", "reconciler")["spec"]["replicas"] == 3
    config = parse_config(
        config_files(docs, "reconciler")["reconciler.yaml"], "reconciler.yaml", CONFIG_DIR
    )
    assert config.leader_election.shards == 16
    [role] = objects(docs, "Role")
    assert role["rules"] == [
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "verbs": ["get", "list", "create", "update", "patch", "delete"],
        }
    ]
    assert one(docs, "Service", "reconciler")["spec"]["publishNotReadyAddresses"] is False


def test_a_single_reconciler_is_never_two() -> None:
    docs = render([VALUE_SETS["default"]])
    reconciler = one(docs, "Deployment", "reconciler")
    assert reconciler["spec"]["replicas"] == 1
    assert reconciler["spec"]["strategy"] == {"type": "Recreate"}  # not even briefly
    assert one(docs, "Service", "reconciler")["spec"]["publishNotReadyAddresses"] is True
    assert not objects(docs, "Role")
    assert (
        parse_config(
            config_files(docs, "reconciler")["reconciler.yaml"], "reconciler.yaml", CONFIG_DIR
        ).leader_election.enabled
        is False
    )
    # The template refuses more replicas without a Lease even when the schema is skipped.
    result = helm(
        "template",
        "klutch",
        str(CHART),
        "--values",
        str(VALUE_SETS["default"]),
        "--set",
        "reconciler.replicas=2",
        "--skip-schema-validation",
    )
    assert result.returncode != 0
    assert "needs reconciler.config.leaderElection.enabled: true" in result.stderr


def test_a_config_change_rolls_the_pods() -> None:
    def checksum(docs: list[dict]) -> str:
        pod = one(docs, "Deployment", "reconciler")["spec"]["template"]
        return pod["metadata"]["annotations"]["checksum/config"]

    before = checksum(render([VALUE_SETS["default"]]))
    after = checksum(render([VALUE_SETS["default"]], set_values=["reconciler.config.workers=8"]))
    assert before != after


def test_components_can_be_left_out() -> None:
    docs = render([VALUE_SETS["default"]], set_values=["reconciler.enabled=false"])
    assert {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs} == {
        "bind-api",
        "binder",
        "crds",
        "kubeconfig",
        "repositorybindings",
    }
    docs = render(set_values=["bindApi.enabled=false"])  # no issuer needed then
    assert "bind-api" not in {d["metadata"]["labels"]["app.kubernetes.io/component"] for d in docs}


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        (["reconciler.replicas=2"], "/reconciler/config"),
        (
            ["reconciler.replicas=2", "reconciler.config.leaderElection.enabled=false"],
            "/reconciler/config/leaderElection/enabled",
        ),
        (
            ["reconciler.config.leaderElection.namespace=elsewhere"],
            "/reconciler/config/leaderElection/namespace",
        ),
        (["reconciler.config.listen=0.0.0.0:9090"], "/reconciler/config/listen"),
        (["reconciler.config.workers=0"], "/reconciler/config/workers"),
        (["reconciler.config.pollInterval=soon"], "/reconciler/config/pollInterval"),
        (["reconciler.rbac.exportedResources[0].resources={*}"], "/reconciler/rbac"),
        (["replicaCount=2"], "replicaCount"),
        (["bindApi.oidc.issuer=http://dex.example.com"], "/bindApi/oidc/issuer"),
        (["bindApi.oidc.audiences=null"], "/bindApi/oidc"),
        (["bindApi.tls.enabled=true"], "/bindApi/tls/secretName"),
        (["bindApi.bindingsPerIdentity=0"], "/bindApi/bindingsPerIdentity"),
        (["bindApi.consumerNamespacePrefix=" + "a" * 21], "/bindApi/consumerNamespacePrefix"),
        (["bindApi.browser.enabled=true"], "/bindApi/browser"),
        (
            [
                "bindApi.browser.enabled=true",
                "bindApi.browser.externalURL=https://bind.example.com",
                "bindApi.browser.clientId=web",
                "bindApi.browser.clientSecret=s",
                "bindApi.browser.sessionKey=short",
            ],
            "/bindApi/browser/sessionKey",
        ),
        (["image.digest=latest"], "/image/digest"),
        (["controlPlane.server=http://kubernetes"], "/controlPlane/server"),
        (["networkPolicy.egressPorts[0].protocol=ICMP"], "/networkPolicy/egressPorts/0/protocol"),
    ],
)
def test_the_schema_refuses_invalid_values(settings: list[str], where: str) -> None:
    result = template([VALUE_SETS["default"]], set_values=settings)
    assert result.returncode != 0, f"accepted: {settings}"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert where in result.stderr, result.stderr


def test_the_bind_api_needs_an_issuer() -> None:
    result = template()
    assert result.returncode != 0
    assert "/bindApi/oidc/issuer" in result.stderr


def chart_metadata() -> dict[str, Any]:
    return yaml.safe_load((CHART / "Chart.yaml").read_text())


def test_the_chart_deploys_this_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert chart_metadata()["appVersion"] == project["version"]
    docs = render([VALUE_SETS["default"]])
    for deployment in objects(docs, "Deployment"):
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] == f"ghcr.io/anynines/klutch-gitops:{project['version']}"


def test_the_image_installs_the_pinned_dependencies() -> None:
    """What the chart runs, `klutch-gitops[server]`, is pinned in the lock within its bounds."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lock = {
        canonicalize_name(line.split("==")[0]): line.split("==")[1].split(";")[0].strip()
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    server = project.get("optional-dependencies", {}).get("server", [])
    for text in [*project["dependencies"], *server]:
        requirement = Requirement(text)
        pinned = lock.get(canonicalize_name(requirement.name))
        assert pinned is not None, f"{text}: not pinned in requirements.lock"
        assert requirement.specifier.contains(pinned, prereleases=True), (text, pinned)
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "requirements.lock" in dockerfile
    assert re.search(r"^USER 10001", dockerfile, re.M)  # numeric: runAsNonRoot can check it
    assert "git" in dockerfile


def test_the_reconcilers_metrics_token_reaches_its_config_and_service_monitor() -> None:
    docs = render([VALUE_SETS["monitoring"]])
    config = parse_config(
        config_files(docs, "reconciler")["reconciler.yaml"], "reconciler.yaml", CONFIG_DIR
    )
    assert config.metrics_token is not None
    namespace = config.metrics_token.namespace
    assert (namespace, config.metrics_token.name, config.metrics_token.key) == (
        one(docs, "ServiceMonitor", "reconciler")["metadata"]["namespace"],
        "reconciler-metrics-token",
        "token",
    )
    [endpoint] = one(docs, "ServiceMonitor", "reconciler")["spec"]["endpoints"]
    assert endpoint["authorization"] == {
        "type": "Bearer",
        "credentials": {"name": "reconciler-metrics-token", "key": "token"},
    }
    [bind_api] = one(docs, "ServiceMonitor", "bind-api")["spec"]["endpoints"]
    assert "authorization" not in bind_api
    default = render([VALUE_SETS["default"]])
    text = config_files(default, "reconciler")["reconciler.yaml"]
    assert parse_config(text, "reconciler.yaml", CONFIG_DIR).metrics_token is None
