"""charts/klutch-gitops as it ships: `helm package` makes klutch-gitops-<version>.tgz holding the
chart's Chart.yaml, schema, README and CRDs but not the ci/ value sets, and the archive renders
what the folder renders. The README's upgrade notes have a section for this version, and its
values table names every value."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path
from typing import Any

import yaml

from tests.helm import CHART, VALUE_SETS, helm, render, template

METADATA = yaml.safe_load((CHART / "Chart.yaml").read_text())
README = CHART / "README.md"


def package(destination: Path) -> Path:
    result = helm("package", str(CHART), "--destination", str(destination))
    assert result.returncode == 0, result.stderr
    archive = destination / f"klutch-gitops-{METADATA['version']}.tgz"
    assert archive.is_file(), result.stdout
    return archive


def test_helm_package_makes_the_versioned_archive(tmp_path: Path) -> None:
    archive = package(tmp_path)
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        chart = tar.extractfile("klutch-gitops/Chart.yaml")
        assert chart is not None
        packaged = yaml.safe_load(chart.read())
    assert packaged["version"] == METADATA["version"]
    assert packaged["appVersion"] == METADATA["appVersion"]
    assert {
        "klutch-gitops/values.yaml",
        "klutch-gitops/values.schema.json",
        "klutch-gitops/README.md",
    } <= names
    crds = {
        f"klutch-gitops/files/crds/{path.name}" for path in (CHART / "files/crds").glob("*.yaml")
    }
    assert crds
    assert crds <= names
    assert not [name for name in names if name.startswith("klutch-gitops/ci/")]
    print(f"{archive.name}: {archive.stat().st_size} bytes, {len(names)} files")


def test_the_archive_renders_what_the_folder_renders(tmp_path: Path) -> None:
    archive = package(tmp_path)
    values = VALUE_SETS["tls"]
    result = helm(
        "template", "klutch", str(archive), "--namespace", "klutch", "--values", str(values)
    )
    assert result.returncode == 0, result.stderr
    from_archive = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
    assert from_archive == render([values])
    assert template([values]).returncode == 0


def leaf_paths(values: Any, prefix: str = "") -> set[str]:
    """Dotted paths of the values; a list or an empty map is a leaf, as is reconciler.config
    (examples/reconciler.yaml documents its fields)."""
    if not isinstance(values, dict) or not values or prefix == "reconciler.config":
        return {prefix}
    return {
        path
        for key, value in values.items()
        for path in leaf_paths(value, f"{prefix}.{key}" if prefix else key)
    }


def test_the_readme_documents_every_value_and_this_versions_upgrade() -> None:
    """A row names a value, a group of them (`….*`), or both components' (`<component>.…`)."""
    text = README.read_text()
    rows = {
        row.replace("<component>.", component)
        for row in re.findall(r"^\| `([^`]+)` \|", text, re.M)
        for component in ("reconciler.", "bindApi.")
    }
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    undocumented = {
        path
        for path in leaf_paths(values)
        if path not in rows
        and not any(row.endswith(".*") and path.startswith(row[:-1]) for row in rows)
    }
    assert not undocumented, f"charts/klutch-gitops/README.md lacks rows for {sorted(undocumented)}"
    assert f"### To {METADATA['version']}" in text, "add this version's upgrade notes"
