"""What ships for Argo CD and Flux: health checks for every claim kind, and examples that keep
the reconciler's .klutch/ files out of their syncs."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from klutch_gitops.catalog import load_xrds
from tests.argocd_health import HEALTH_LUA, argocd_health

ROOT = Path(__file__).resolve().parents[3]
KINDS = sorted(xrd["spec"]["claimNames"]["kind"] for xrd in load_xrds())


def test_argocd_cm_holds_the_script_for_every_claim_kind() -> None:
    config_map = yaml.safe_load((ROOT / "catalog/health/argocd/argocd-cm.yaml").read_text())
    assert (config_map["kind"], config_map["metadata"]["name"]) == ("ConfigMap", "argocd-cm")
    assert config_map["data"] == {
        f"resource.customizations.health.anynines.com_{kind}": HEALTH_LUA.read_text()
        for kind in KINDS
    }


def test_flux_health_check_expressions_cover_every_claim_kind() -> None:
    exprs = yaml.safe_load((ROOT / "catalog/health/flux/health-check-exprs.yaml").read_text())
    assert [(e["apiVersion"], e["kind"]) for e in exprs] == [("anynines.com/v1", k) for k in KINDS]
    for entry in exprs:
        assert set(entry) == {"apiVersion", "kind", "inProgress", "failed", "current"}
        assert "c.type == 'Ready' && c.status == 'True'" in entry["current"]
        assert "c.type == 'Synced' && c.status == 'False'" in entry["failed"]
        assert "observedGeneration" in entry["inProgress"]


def test_the_flux_example_uses_them_and_ignores_klutch_files() -> None:
    kustomization = yaml.safe_load((ROOT / "examples/flux/kustomization.yaml").read_text())
    exprs = yaml.safe_load((ROOT / "catalog/health/flux/health-check-exprs.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.toolkit.fluxcd.io/v1"
    assert kustomization["spec"]["healthCheckExprs"] == exprs
    assert kustomization["spec"]["prune"] is True
    source = yaml.safe_load((ROOT / "examples/flux/gitrepository.yaml").read_text())
    assert source["kind"] == "GitRepository"
    assert kustomization["spec"]["sourceRef"]["name"] == source["metadata"]["name"]
    patterns = (ROOT / "examples/flux/.sourceignore").read_text().splitlines()
    assert ".klutch/" in patterns


def test_the_argocd_example_excludes_klutch_files() -> None:
    application = yaml.safe_load((ROOT / "examples/argocd/application.yaml").read_text())
    assert application["kind"] == "Application"
    source = application["spec"]["source"]
    assert source["directory"]["exclude"] == ".klutch/*"
    assert source["directory"]["recurse"] is True
    assert "Replace=true" not in application["spec"]["syncPolicy"]["syncOptions"]


CLAIM = {
    "apiVersion": "anynines.com/v1",
    "kind": "PostgresqlInstance",
    "metadata": {"name": "db", "namespace": "team", "generation": 4},
}


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            {"observedGeneration": 3, "conditions": [{"type": "Ready", "status": "True"}]},
            "Progressing",
        ),
        ({"conditions": [{"type": "Synced", "status": "False", "reason": "Oops"}]}, "Degraded"),
        ({"conditions": [{"type": "Ready", "status": "Unknown"}]}, "Progressing"),
        ({"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 4}]}, "Healthy"),
    ],
)
def test_health_script_on_plain_objects(status: dict, expected: str) -> None:
    assert argocd_health({**CLAIM, "status": status})[0] == expected


def test_the_script_uses_no_library_argo_cd_leaves_out() -> None:
    code = "\n".join(
        line for line in HEALTH_LUA.read_text().splitlines() if not line.strip().startswith("--")
    )
    for library in ("string.", "math.", "os.", "io.", "debug.", "coroutine.", ":"):
        assert library not in code, library  # ":" would be a string method call
    with pytest.raises(Exception, match="string"):
        argocd_health(CLAIM, 'return {status = string.lower("X")}')
