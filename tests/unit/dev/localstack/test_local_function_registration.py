"""How the local stack points Crossplane at function-klutch-local (localstack/crossplane.py),
checked against what Crossplane reads: its function runner takes the Active FunctionRevision
labelled ``pkg.crossplane.io/package: <function>`` and dials ``status.endpoint``
(crossplane/crossplane internal/xfn/function_runner.go ``getClientConn``); 2.x accepts a
Composition revision only when that revision's ``status.capabilities`` has ``composition``
(internal/xfn/capabilities.go); paused packages and revisions are left alone
(internal/controller/pkg/manager and revision reconcilers, ``meta.IsPaused``); External runtime
means no Deployment (internal/controller/pkg/pkg.go).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from klutch_gitops.dev.localstack import crossplane
from klutch_gitops.errors import KlutchError

pytestmark = pytest.mark.unit


def test_the_function_and_its_revision_point_crossplane_at_the_endpoint() -> None:
    function, revision = crossplane.function_objects("127.0.0.1:4242")
    assert function["kind"] == "Function"
    assert function["metadata"]["name"] == crossplane.FUNCTION_NAME
    assert revision["metadata"]["labels"] == {"pkg.crossplane.io/package": "function-klutch-local"}
    assert revision["spec"]["desiredState"] == "Active"
    assert revision["status"] == {"endpoint": "127.0.0.1:4242", "capabilities": ["composition"]}
    for obj in (function, revision):
        assert obj["metadata"]["annotations"] == {"crossplane.io/paused": "true"}
    assert function["spec"]["package"] == revision["spec"]["image"]


def test_core_runs_functions_externally(tmp_path: Path) -> None:
    paths = crossplane.CrossplanePaths(tmp_path)
    argv, _ = crossplane.command(Path("/bin/crossplane"), paths, 1, 2)
    assert "--package-runtime=External" in argv
    assert f"--tls-client-certs-dir={paths.tls}" in argv


def test_each_line_names_the_release_it_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    assert crossplane.DEFAULT_VERSION == "2"
    assert crossplane.release("2").startswith("v2.")
    assert crossplane.release("1.20").startswith("v1.20.")
    monkeypatch.setenv(crossplane.VERSION_VARIABLE, "1.20")
    assert crossplane.release() == crossplane.release("1.20")
    monkeypatch.setenv(crossplane.VERSION_VARIABLE, "1.19")
    with pytest.raises(KlutchError, match=r"KLUTCH_CROSSPLANE_VERSION='1\.19'"):
        crossplane.selected_version()
