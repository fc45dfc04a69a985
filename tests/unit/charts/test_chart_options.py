"""charts/klutch-gitops, the values a platform team sets per install: where the image comes from,
the log level and extra arguments the CLIs take, extra environment, security contexts (OpenShift
drops the fixed UID), disruption budgets, topology spread, and `rbac.create`; each as `helm
template` renders it, and each typo refused by values.schema.json naming the key."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import typer

from klutch_gitops.cli import app
from tests.helm import CHART, VALUE_SETS, render, template

BASE = [VALUE_SETS["default"]]  # the bind API's required values
VERSION = tomllib.loads((CHART.parents[1] / "pyproject.toml").read_text())["project"]["version"]
DIGEST = "sha256:" + "ab" * 32
RBAC_KINDS = {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}
POD_KINDS = ("Deployment", "StatefulSet")


def workloads(docs: list[dict]) -> dict[str, dict]:
    """The Pod specs by component."""
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc["spec"]["template"]["spec"]
        for doc in docs
        if doc["kind"] in POD_KINDS
    }


def containers(docs: list[dict]) -> dict[str, dict]:
    return {component: pod["containers"][0] for component, pod in workloads(docs).items()}


def budgets(docs: list[dict]) -> dict[str, dict]:
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc["spec"]
        for doc in docs
        if doc["kind"] == "PodDisruptionBudget"
    }


@pytest.mark.parametrize(
    ("settings", "image"),
    [
        ([], f"ghcr.io/anynines/klutch-gitops:{VERSION}"),
        (["image.tag=0.2.0-rc.1"], "ghcr.io/anynines/klutch-gitops:0.2.0-rc.1"),
        ([f"image.digest={DIGEST}"], f"ghcr.io/anynines/klutch-gitops@{DIGEST}"),
        (["image.registry=quay.io"], f"quay.io/anynines/klutch-gitops:{VERSION}"),
        (
            ["image.registry=quay.io", "global.imageRegistry=mirror.example.com:5000"],
            f"mirror.example.com:5000/anynines/klutch-gitops:{VERSION}",
        ),
        (
            ["image.registry=", "image.repository=klutch-gitops"],  # loaded into kind
            f"klutch-gitops:{VERSION}",
        ),
    ],
)
def test_the_image_is_registry_repository_and_tag_or_digest(
    settings: list[str], image: str
) -> None:
    for container in containers(render(BASE, set_values=settings)).values():
        assert container["image"] == image


def test_the_mirror_value_set_pulls_by_digest_from_the_global_registry() -> None:
    for container in containers(render([VALUE_SETS["no-rbac"]])).values():
        registry, _, rest = container["image"].partition("/")
        assert registry == "registry.internal.example.com:5000"
        assert rest.startswith("anynines/klutch-gitops@sha256:")


def parse(args: list[str]) -> dict[str, object]:
    """The options the real command line parses from the container's arguments."""
    command = typer.main.get_command(app)
    [name, *rest] = args
    subcommand = command.commands[name]  # type: ignore[attr-defined]
    return subcommand.make_context(name, rest, resilient_parsing=False).params


def test_log_level_and_extra_args_reach_the_command_lines() -> None:
    docs = render(
        BASE,
        set_values=[
            "reconciler.logLevel=debug",
            "reconciler.extraArgs={--once}",
            "bindApi.logLevel=warning",
        ],
    )
    found = containers(docs)
    assert found["reconciler"]["args"] == [
        "run",
        "--config",
        "/etc/klutch-gitops/config/reconciler.yaml",
        "--log-level",
        "debug",
        "--once",
    ]
    run = parse(found["reconciler"]["args"])
    assert (run["log_level"], run["once"]) == ("debug", True)
    assert run["config"] == Path("/etc/klutch-gitops/config/reconciler.yaml")
    bind_api = parse(found["bind-api"]["args"])
    assert bind_api["log_level"] == "warning"
    assert bind_api["config"] == Path("/etc/klutch-gitops/config/bind-api.yaml")
    for args in (c["args"] for c in containers(render(BASE)).values()):
        assert parse(args)["log_level"] == "info"


def test_extra_environment_comes_after_the_charts_own() -> None:
    found = containers(render([VALUE_SETS["scheduling"]]))
    env = [e["name"] for e in found["reconciler"]["env"]]
    assert env == ["HOME", "POD_NAME", "GIT_TRACE"]  # the chart's first, never replaced
    assert found["reconciler"]["envFrom"] == [
        {"configMapRef": {"name": "klutch-gitops-proxy", "optional": True}}
    ]
    assert "env" not in found["bind-api"]


def test_openshift_drops_the_fixed_ids_and_keeps_the_restricted_profile() -> None:
    default, openshift = (
        workloads(render([VALUE_SETS[name]])) for name in ("default", "openshift")
    )
    for component, pod in openshift.items():
        context = pod["securityContext"]
        assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(context), context
        assert context == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        assert (
            pod["containers"][0]["securityContext"]
            == (default[component]["containers"][0]["securityContext"])
        )
    for pod in default.values():
        assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["fsGroup"] == 10001


def test_security_contexts_take_additions_per_component() -> None:
    pods = workloads(
        render(
            BASE,
            set_values=[
                "reconciler.podSecurityContext.supplementalGroups={5000}",
                "bindApi.securityContext.runAsUser=20000",
            ],
        )
    )
    assert pods["reconciler"]["securityContext"]["supplementalGroups"] == [5000]
    assert pods["reconciler"]["securityContext"]["runAsUser"] == 10001
    bind_api = pods["bind-api"]["containers"][0]["securityContext"]
    assert bind_api["runAsUser"] == 20000
    assert bind_api["readOnlyRootFilesystem"] is True  # the rest of the defaults stay


def test_scheduling_values_reach_the_pods() -> None:
    pods = workloads(render([VALUE_SETS["scheduling"]]))
    reconciler = pods["reconciler"]
    assert reconciler["priorityClassName"] == "klutch-gitops"
    assert reconciler["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert reconciler["tolerations"][0]["key"] == "dedicated"
    assert "nodeAffinity" in reconciler["affinity"]
    assert reconciler["containers"][0]["resources"]["limits"] == {"memory": "2Gi"}
    # A constraint without a labelSelector selects this component's Pods.
    [spread] = reconciler["topologySpreadConstraints"]
    assert spread["labelSelector"] == {
        "matchLabels": {
            "app.kubernetes.io/name": "klutch-gitops",
            "app.kubernetes.io/instance": "klutch",
            "app.kubernetes.io/component": "reconciler",
        }
    }
    # One with a labelSelector keeps it.
    [spread] = pods["bind-api"]["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "bind-api"
    assert spread["matchLabelKeys"] == ["pod-template-hash"]
    assert "topologySpreadConstraints" not in workloads(render(BASE))["reconciler"]


def test_budgets_come_with_several_ready_replicas() -> None:
    assert budgets(render(BASE)) == {}
    found = budgets(render([VALUE_SETS["scheduling"]]))  # 3 sharded reconcilers, 2 bind APIs
    assert found["reconciler"]["maxUnavailable"] == 1
    assert found["bind-api"]["minAvailable"] == 1
    assert "maxUnavailable" not in found["bind-api"]
    for component, spec in found.items():
        assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == component
    # Standbys are never Ready: a budget would block the leader's node, so none by default.
    assert "reconciler" not in budgets(render([VALUE_SETS["replicas"]]))
    assert "bind-api" in budgets(render([VALUE_SETS["replicas"]]))


def test_budgets_follow_enabled_when_set() -> None:
    one = budgets(render(BASE, set_values=["reconciler.podDisruptionBudget.enabled=true"]))
    assert one == {"reconciler": one["reconciler"]}
    assert one["reconciler"]["maxUnavailable"] == 1
    none = budgets(
        render(
            [VALUE_SETS["scheduling"]],
            set_values=[
                "reconciler.podDisruptionBudget.enabled=false",
                "bindApi.podDisruptionBudget.enabled=false",
            ],
        )
    )
    assert none == {}
    result = template(
        [VALUE_SETS["replicas"]], set_values=["reconciler.podDisruptionBudget.enabled=true"]
    )
    assert result.returncode != 0
    assert "standbys are never Ready" in result.stderr
    assert "reconciler.config.leaderElection.shards" in result.stderr


def test_without_rbac_the_chart_grants_nothing_and_names_the_service_accounts() -> None:
    docs = render([VALUE_SETS["no-rbac"]])
    assert not [doc for doc in docs if doc["kind"] in RBAC_KINDS]
    pods = workloads(docs)
    assert pods["reconciler"]["serviceAccountName"] == "klutch-gitops-reconciler"
    assert pods["bind-api"]["serviceAccountName"] == "klutch-gitops-bind-api"
    accounts = [doc["metadata"]["name"] for doc in docs if doc["kind"] == "ServiceAccount"]
    assert accounts == ["klutch-gitops-reconciler"]  # the bind API's exists already
    with_rbac = render([VALUE_SETS["replicas"]])  # the Leases' Role too
    assert {doc["kind"] for doc in with_rbac} >= RBAC_KINDS
    result = template(BASE, set_values=["rbac.create=false"])
    assert result.returncode != 0
    assert "serviceAccount.name is required when rbac.create is false" in result.stderr


@pytest.mark.parametrize(
    ("settings", "where"),
    [
        (["reconciler.ingres.enabled=true"], "additional properties 'ingres' not allowed"),
        (["bindApi.logLevel=verbose"], "/bindApi/logLevel"),
        (["reconciler.extraArgs[0]=1"], "/reconciler/extraArgs/0"),
        (["reconciler.extraEnv[0].nme=X"], "/reconciler/extraEnv/0"),
        (["reconciler.env[0].name=X"], "additional properties 'env' not allowed"),
        (["reconciler.podSecurityContext.runAsUsr=1"], "'runAsUsr' not allowed"),
        (["bindApi.securityContext.privileged=yes"], "/bindApi/securityContext/privileged"),
        (["reconciler.securityContext.seccompProfile.typ=RuntimeDefault"], "'typ' not allowed"),
        (["bindApi.extraEnvFrom[0].secretRef.nam=proxy"], "/bindApi/extraEnvFrom/0/secretRef"),
        (["image.registry=https://ghcr.io"], "/image/registry"),
        (["global.imageRegistry=5"], "/global/imageRegistry"),
        (["rbac.create=maybe"], "/rbac/create"),
        (["rbac.crate=false"], "additional properties 'crate' not allowed"),
        (["bindApi.podDisruptionBudget.minAvailable=half"], "/bindApi/podDisruptionBudget"),
        (["bindApi.podDisruptionBudget.maxUnavalable=1"], "'maxUnavalable' not allowed"),
        (
            ["reconciler.topologySpreadConstraints[0].maxSkew=1"],
            "/reconciler/topologySpreadConstraints/0",
        ),
        (["bindApi.ingress.hosts[0]=Bind.Example.com"], "/bindApi/ingress/hosts/0"),
        (["bindApi.ingress.tls[0].secret=x"], "'secret' not allowed"),
        (["reconciler.httpRoute.enabled=true"], "/reconciler/httpRoute/parentRefs"),
        (["bindApi.httpRoute.parentRefs[0].nam=gw"], "/bindApi/httpRoute/parentRefs/0"),
    ],
)
def test_the_schema_refuses_mistyped_new_values(settings: list[str], where: str) -> None:
    result = template(BASE, set_values=settings)
    assert result.returncode != 0, f"accepted: {settings}"
    assert "values don't meet the specifications of the schema" in result.stderr
    assert where in result.stderr, result.stderr


NEW_VALUES = (
    "logLevel",
    "extraArgs",
    "extraEnv",
    "extraEnvFrom",
    "topologySpreadConstraints",
    "podSecurityContext",
    "securityContext",
    "podDisruptionBudget",
    "ingress",
    "httpRoute",
)


def loose_objects(schema: dict, where: str) -> list[str]:
    """Paths of object schemas below ``schema`` that would take any key."""
    found = []
    if schema.get("type") == "object" and "additionalProperties" not in schema:
        found.append(where)
    for name, child in schema.get("properties", {}).items():
        found += loose_objects(child, f"{where}/{name}")
    if isinstance(schema.get("items"), dict):
        found += loose_objects(schema["items"], f"{where}/items")
    return found


def test_every_new_value_is_typed_and_closed() -> None:
    """A typo anywhere in the new values is refused: every object in their schema closes its
    keys (additionalProperties false, or typed values for maps such as annotations)."""
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]
    loose = loose_objects(schema["rbac"], "/rbac") + loose_objects(schema["image"], "/image")
    for component in ("reconciler", "bindApi"):
        for name in NEW_VALUES:
            value = schema[component]["properties"][name]
            assert value.get("type") or value.get("enum"), f"/{component}/{name} is untyped"
            loose += loose_objects(value, f"/{component}/{name}")
    assert loose == []
