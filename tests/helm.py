"""Render charts/klutch-gitops with the helm that `make bins` builds, for the chart's tests."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from klutch_gitops.dev.localstack import binaries
from klutch_gitops.errors import KlutchError

CHART = Path(__file__).resolve().parents[1] / "charts" / "klutch-gitops"
# The value sets of chart-testing's convention, shared by helm lint, helm template and the tests.
VALUE_SETS = {path.name.removesuffix("-values.yaml"): path for path in sorted(CHART.glob("ci/*"))}
# The Kubernetes version of the local stack (tools/bins/kubernetes).
KUBE_VERSION = "1.34.3"


def helm_binary() -> Path:
    """The helm binary, or a test failure that says how to build it."""
    try:
        return binaries.require("helm")["helm"]
    except KlutchError as error:
        pytest.fail(f"the chart's tests need helm: {error.message}; {error.fix}", pytrace=False)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, check=False, timeout=120
    )


def template(
    values: Iterable[Path] = (),
    *,
    set_values: Iterable[str] = (),
    namespace: str = "klutch",
    release: str = "klutch",
) -> subprocess.CompletedProcess[str]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    args += ["--kube-version", KUBE_VERSION]
    args += [arg for path in values for arg in ("--values", str(path))]
    args += [arg for value in set_values for arg in ("--set", value)]
    return helm(*args)


def render(values: Iterable[Path] = (), **options: Any) -> list[dict[str, Any]]:
    """The rendered objects; a failed render fails the test with helm's message."""
    result = template(values, **options)
    assert result.returncode == 0, f"helm template failed:\n{result.stderr}"
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


# The Gateway API release whose standard HTTPRoute CRD the dry run installs: the newest the local
# Go toolchain can download (v1.7.0 needs go 1.27).
GATEWAY_API = "sigs.k8s.io/gateway-api@v1.6.0"


def gateway_api_crd(kind: str = "httproutes") -> dict[str, Any]:
    """The Gateway API's standard CRD of ``kind``, from its upstream release as the Go module
    proxy serves it (config/crd/standard/ of the module), downloaded into the module cache once;
    a test failure that says why when it cannot be fetched."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    result = subprocess.run(
        [go, "mod", "download", "-json", GATEWAY_API],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        cwd=tempfile.gettempdir(),  # outside any module
        env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"},
    )
    if result.returncode != 0:
        pytest.fail(
            f"cannot fetch {GATEWAY_API} for its HTTPRoute CRD: {result.stdout}{result.stderr}",
            pytrace=False,
        )
    directory = Path(json.loads(result.stdout)["Dir"])
    path = directory / "config" / "crd" / "standard" / f"gateway.networking.k8s.io_{kind}.yaml"
    return yaml.safe_load(path.read_text())
