"""charts/klutch-gitops with ``reconciler.workDir.persistence``: the StatefulSet and its claim
template pass a server-side dry run on the real Control Plane under the restricted Pod Security
profile, alone and with sharded replicas."""

from __future__ import annotations

import pytest

from klutch_gitops.dev.localstack.stack import StackInfo
from tests.conftest import TwinNamespace
from tests.helm import VALUE_SETS, render

from .test_chart import dry_run, restricted

PERSISTENT = [
    "reconciler.workDir.persistence.enabled=true",
    "reconciler.workDir.persistence.size=10Gi",
]


@pytest.mark.parametrize("values", ["default", "shards"])
def test_a_persistent_work_directory_passes_a_server_side_dry_run(
    values: str, namespace: TwinNamespace, stack: StackInfo
) -> None:
    restricted(namespace)
    docs = render([VALUE_SETS[values]], set_values=PERSISTENT, namespace=namespace.name)
    [workload] = [doc for doc in docs if doc["kind"] == "StatefulSet"]
    assert workload["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "work"
    result = dry_run(stack, docs)
    assert result.returncode == 0, result.stderr
    assert "PodSecurity" not in result.stderr, result.stderr
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(docs), result.stdout
