"""charts/klutch-gitops: the reconciler's work directory, an emptyDir by default or, with
``reconciler.workDir.persistence``, a claim per replica from a StatefulSet's volumeClaimTemplates,
so a restarted replica finds its checkouts."""

from __future__ import annotations

import pytest

from tests.helm import VALUE_SETS, render, template

pytestmark = pytest.mark.unit

SHARDS = [
    "reconciler.replicas=3",
    "reconciler.config.leaderElection.enabled=true",
    "reconciler.config.leaderElection.shards=16",
]
BASE = [VALUE_SETS["default"]]  # the bind API's required values
PERSISTENT = [
    "reconciler.workDir.persistence.enabled=true",
    "reconciler.workDir.persistence.size=20Gi",
    "reconciler.workDir.persistence.storageClass=fast",
]


def reconciler(docs: list[dict]) -> dict:
    [found] = [
        doc
        for doc in docs
        if doc["kind"] in ("Deployment", "StatefulSet")
        and doc["metadata"]["labels"]["app.kubernetes.io/component"] == "reconciler"
    ]
    return found


def work_mount(workload: dict) -> str:
    [container] = workload["spec"]["template"]["spec"]["containers"]
    [mount] = [m for m in container["volumeMounts"] if m["name"] == "work"]
    return mount["mountPath"]


def test_the_default_work_directory_is_an_empty_dir_of_a_deployment() -> None:
    workload = reconciler(render(BASE))
    assert workload["kind"] == "Deployment"
    [work] = [v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == "work"]
    assert work == {"name": "work", "emptyDir": {"sizeLimit": "4Gi"}}
    assert "volumeClaimTemplates" not in workload["spec"]
    assert work_mount(workload) == "/var/lib/klutch-gitops"


@pytest.mark.parametrize("scale", [[], SHARDS], ids=["one replica", "shards"])
def test_persistence_gives_each_replica_its_own_claim(scale: list[str]) -> None:
    docs = render(BASE, set_values=[*scale, *PERSISTENT])
    workload = reconciler(docs)
    assert workload["kind"] == "StatefulSet"
    spec = workload["spec"]
    assert spec["podManagementPolicy"] == "Parallel"
    assert spec["updateStrategy"] == {"type": "RollingUpdate"}
    assert "strategy" not in spec
    [service] = [
        d
        for d in docs
        if d["kind"] == "Service"
        and d["metadata"]["labels"]["app.kubernetes.io/component"] == "reconciler"
    ]
    assert spec["serviceName"] == service["metadata"]["name"]
    volumes = spec["template"]["spec"]["volumes"]
    assert "work" not in {v["name"] for v in volumes}  # the claim template provides it
    [claim] = spec["volumeClaimTemplates"]
    assert claim["metadata"]["name"] == "work"
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "20Gi"}},
    }
    assert claim["metadata"]["labels"].items() <= spec["selector"]["matchLabels"].items()
    assert work_mount(workload) == "/var/lib/klutch-gitops"


def test_no_storage_class_means_the_clusters_default() -> None:
    workload = reconciler(render(BASE, set_values=["reconciler.workDir.persistence.enabled=true"]))
    [claim] = workload["spec"]["volumeClaimTemplates"]
    assert "storageClassName" not in claim["spec"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "4Gi"


def test_persistence_with_standby_replicas_is_refused_with_the_fix() -> None:
    result = template(
        BASE,
        set_values=[
            "reconciler.replicas=2",
            "reconciler.config.leaderElection.enabled=true",
            "reconciler.workDir.persistence.enabled=true",
        ],
    )
    assert result.returncode != 0
    assert "reconciler.config.leaderElection.shards" in result.stderr
    assert "persistence.enabled: false" in result.stderr


@pytest.mark.parametrize(
    "value",
    [
        "reconciler.workDir.persistence.size=lots",
        "reconciler.workDir.persistence.accessModes={ReadOnlyMany}",
        "reconciler.workDir.persistence.retain=true",
    ],
)
def test_the_schema_refuses_bad_persistence_values(value: str) -> None:
    result = template(BASE, set_values=["reconciler.workDir.persistence.enabled=true", value])
    assert result.returncode != 0
    assert "workDir" in result.stderr
