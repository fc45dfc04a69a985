"""Write every schema the models define, or with ``--check`` fail naming the files that drifted:

- ``schemas/reconciler-config.schema.json``, ``schemas/bind-api-config.schema.json`` and
  ``schemas/repositorybinding-spec.schema.json`` (JSON Schema draft-07, for editors:
  ``# yaml-language-server: $schema=…``);
- the RepositoryBinding CRD's ``openAPIV3Schema.properties.spec``, in ``catalog/crds`` and the
  chart's copy (structural, ``models.structural``);
- the chart's ``values.schema.json`` subtree ``properties.reconciler.properties.config``: the
  reconciler's config less the keys the chart sets itself.

    python -m klutch_gitops.models.schemas [--check]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from klutch_gitops.models.bind_api import BindApiConfig
from klutch_gitops.models.binding import RepositoryBindingSpec
from klutch_gitops.models.reconciler import ReconcilerConfig
from klutch_gitops.models.structural import inline, structural, without_titles

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas"
CRD_NAME = "gitops.klutch.anynines.com_repositorybindings.yaml"
CRD_FILES = (
    ROOT / "catalog" / "crds" / CRD_NAME,
    ROOT / "charts/klutch-gitops/files/crds" / CRD_NAME,  # the chart's templates/crds.yaml
)
VALUES_SCHEMA = ROOT / "charts/klutch-gitops/values.schema.json"
BASE_URL = "https://raw.githubusercontent.com/anynines/klutch-gitops/main/schemas/"
# What the chart's reconciler-config.yaml template sets itself, so its values may not.
CHART_OWNED = {
    "controlPlane": "set by the chart (controlPlane.*)",
    "listen": "set by the chart (reconciler.port)",
    "workDir": "set by the chart (an emptyDir, or reconciler.workDir.persistence)",
}
CHART_OWNED_ELECTION = {"namespace": "set by the chart (the release namespace)"}
# The CRD's schema keys in the order a person reads them.
KEY_ORDER = ("description", "type", "required", "default", "enum", "format", "rule")
SPEC_START, SPEC_END = "            spec:\n", "            status:\n"


def json_schema(model: type[BaseModel], name: str) -> dict[str, Any]:
    """The editors' JSON Schema of ``model``: draft-07, the newest that yaml-language-server (VS
    Code's YAML extension, and others built on it) validates with."""
    schema = without_titles(
        model.model_json_schema(by_alias=True, ref_template="#/definitions/{model}")
    )
    definitions = schema.pop("$defs", {})
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": BASE_URL + name,
        "title": model.__name__,
        **schema,
        **({"definitions": definitions} if definitions else {}),
    }


def chart_config_schema() -> dict[str, Any]:
    """``reconciler.config`` of the chart's values: the reconciler's config, inlined, with the
    chart's own keys refused (``not: {}``) so a value that would be overwritten is an error."""
    schema = inline(without_titles(ReconcilerConfig.model_json_schema(by_alias=True)))
    properties = schema["properties"]
    for key, why in CHART_OWNED.items():
        properties[key] = {"not": {}, "description": why}
    election = properties["leaderElection"]["properties"]
    for key, why in CHART_OWNED_ELECTION.items():
        election[key] = {"not": {}, "description": why}
    schema["required"] = [k for k in schema.get("required", []) if k not in CHART_OWNED]
    if not schema["required"]:
        del schema["required"]
    schema["description"] = (
        "The reconciler's config file (schemas/reconciler-config.schema.json, generated from "
        "klutch_gitops/models by python -m klutch_gitops.models.schemas) without controlPlane, "
        "listen and workDir, which the chart sets."
    )
    return schema


def crd_spec_schema() -> dict[str, Any]:
    """The RepositoryBinding CRD's ``spec``: the model's schema, structural."""
    schema: dict[str, Any] = ordered(
        structural(RepositoryBindingSpec.model_json_schema(by_alias=True))
    )
    return schema


def ordered(node: Any) -> Any:
    if isinstance(node, list):
        return [ordered(item) for item in node]
    if not isinstance(node, dict):
        return node
    rank = {key: index for index, key in enumerate(KEY_ORDER)}
    keys = sorted(node, key=lambda k: (rank.get(k, len(rank)), k.startswith("x-")))
    if "properties" in node and "type" in node:
        return {
            k: {p: ordered(s) for p, s in node[k].items()}
            if k == "properties"
            else ordered(node[k])
            for k in keys
        }
    return {k: node[k] if k == "default" else ordered(node[k]) for k in keys}


def crd_text(current: str) -> str:
    """The CRD file with its ``spec`` schema block replaced by the generated one."""
    start, end = current.find(SPEC_START), current.find(SPEC_END)
    if start < 0 or end < start:
        raise SystemExit(f"cannot find the spec schema ({SPEC_START.strip()}) in the CRD")
    block = yaml.safe_dump({"spec": crd_spec_schema()}, sort_keys=False, width=96)
    indented = "".join(" " * 12 + line if line.strip() else line for line in block.splitlines(True))
    return current[:start] + indented + current[end:]


def values_text(current: str) -> str:
    data = json.loads(current)
    data["properties"]["reconciler"]["properties"]["config"] = chart_config_schema()
    return dumps(data)


def dumps(data: Any) -> str:
    return json.dumps(data, indent=2) + "\n"


def outputs() -> dict[Path, Callable[[str], str]]:
    """Every generated file and how its new text follows from its current one."""
    files: dict[Path, Callable[[str], str]] = {
        SCHEMAS / name: _json_schema_text(model, name)
        for name, model in (
            ("reconciler-config.schema.json", ReconcilerConfig),
            ("bind-api-config.schema.json", BindApiConfig),
            ("repositorybinding-spec.schema.json", RepositoryBindingSpec),
        )
    }
    files.update(dict.fromkeys(CRD_FILES, crd_text))
    files[VALUES_SCHEMA] = values_text
    return files


def _json_schema_text(model: type[BaseModel], name: str) -> Callable[[str], str]:
    """An editors' schema's text, which does not follow from the file's current one."""
    return lambda _: dumps(json_schema(model, name))


def drifted() -> list[Path]:
    """The generated files whose text is not what the models give."""
    found = []
    for path, render in outputs().items():
        current = path.read_text() if path.exists() else ""
        if render(current) != current:
            found.append(path)
    return found


def main(argv: list[str]) -> int:
    if argv == ["--check"]:
        stale = drifted()
        for path in stale:
            shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
            print(f"{shown}: differs from klutch_gitops/models", file=sys.stderr)
        if stale:
            print("fix: python -m klutch_gitops.models.schemas", file=sys.stderr)
        return 1 if stale else 0
    if argv:
        print("usage: python -m klutch_gitops.models.schemas [--check]", file=sys.stderr)
        return 2
    SCHEMAS.mkdir(exist_ok=True)
    for path, render in outputs().items():
        current = path.read_text() if path.exists() else ""
        if (text := render(current)) != current:
            path.write_text(text)
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
