"""The schemas generated from klutch_gitops/models agree with the models: the published JSON
Schemas, the chart's ``reconciler.config`` values schema and the RepositoryBinding CRD are what
``python -m klutch_gitops.models.schemas`` writes, refuse what the models refuse (typos, wrong
types) naming the field, and the examples document every field."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft7Validator
from pydantic import BaseModel

from klutch_gitops.config_file import parse_config
from klutch_gitops.errors import KlutchError
from klutch_gitops.models import schemas
from klutch_gitops.models.bind_api import BindApiConfig
from klutch_gitops.models.problems import inner_model
from klutch_gitops.models.reconciler import ReconcilerConfig
from tests.helm import VALUE_SETS, template

ROOT = schemas.ROOT
EXAMPLES = ROOT / "examples"


def validator(name: str) -> Draft7Validator:
    """The published schema's validator: draft-07, what yaml-language-server speaks."""
    schema = json.loads((ROOT / "schemas" / name).read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    Draft7Validator.check_schema(schema)
    return Draft7Validator(schema)


def schema_errors(name: str, document: Any) -> list[str]:
    """Each error as ``/json/path: message``."""
    return [
        "/" + "/".join(map(str, error.absolute_path)) + ": " + error.message
        for error in validator(name).iter_errors(document)
    ]


def test_the_generated_files_are_what_the_models_give() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "klutch_gitops.models.schemas", "--check"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_the_check_names_a_drifted_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    values = json.loads(schemas.VALUES_SCHEMA.read_text())
    del values["properties"]["reconciler"]["properties"]["config"]["properties"]["workers"]
    stale = tmp_path / "values.schema.json"
    stale.write_text(json.dumps(values, indent=2) + "\n")
    monkeypatch.setattr(schemas, "VALUES_SCHEMA", stale)
    assert schemas.main(["--check"]) == 1
    assert f"{stale}: differs from klutch_gitops/models" in capsys.readouterr().err


CONFIG = {"controlPlane": {"kubeconfig": "cp.kubeconfig"}}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"pollIntervall": "1s"}, "pollIntervall"),
        ({"workers": "4"}, "workers"),
        ({"pollInterval": "0s"}, "pollInterval"),
        ({"listen": "nonsense"}, "listen"),
        ({"leaderElection": {"enabled": "true"}}, "leaderElection.enabled"),
        ({"metricsToken": {"file": "a", "env": "B"}}, "metricsToken"),
    ],
)
def test_the_schema_and_the_model_refuse_alike(change: dict, field: str, tmp_path: Path) -> None:
    document = {**CONFIG, **change}
    errors = schema_errors("reconciler-config.schema.json", document)
    assert errors, f"the schema accepts {change}"
    assert field.split(".")[-1] in " ".join(errors), errors
    with pytest.raises(KlutchError) as raised:
        parse_config(yaml.safe_dump(document), "c.yaml", tmp_path)
    assert f"c.yaml: {field}" in raised.value.message


def test_the_schema_and_the_model_accept_alike(tmp_path: Path) -> None:
    document = {**CONFIG, "pollInterval": "1m30s", "listen": "[::]:8080", "workers": 64}
    assert schema_errors("reconciler-config.schema.json", document) == []
    assert parse_config(yaml.safe_dump(document), "c.yaml", tmp_path).poll_interval == 90.0


@pytest.mark.parametrize(
    ("example", "schema"),
    [
        ("reconciler.yaml", "reconciler-config.schema.json"),
        ("bind-api.yaml", "bind-api-config.schema.json"),
    ],
)
def test_the_examples_name_and_pass_their_schema(example: str, schema: str) -> None:
    text = (EXAMPLES / example).read_text()
    assert text.startswith(f"# yaml-language-server: $schema=../schemas/{schema}\n")
    assert schema_errors(schema, yaml.safe_load(text)) == []


def test_a_repository_binding_spec_passes_its_schema() -> None:
    spec = {
        "url": "git@github.com:team/orders.git",
        "appNamespaces": ["orders"],
        "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
        "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
        "pollInterval": "1m30s",
    }
    assert schema_errors("repositorybinding-spec.schema.json", spec) == []
    typo = schema_errors("repositorybinding-spec.schema.json", {**spec, "pollIntervall": "1s"})
    assert any("pollIntervall" in error for error in typo)


def walk(model: type[BaseModel], data: Any) -> Iterator[tuple[type[BaseModel], set[str]]]:
    """Every model instance in ``data`` with the keys it holds."""
    if isinstance(data, list):
        for item in data:
            yield from walk(model, item)
        return
    if not isinstance(data, dict):
        return
    yield model, set(data)
    for name, field in model.model_fields.items():
        inner = inner_model(field.annotation)
        if inner is not None and (field.alias or name) in data:
            yield from walk(inner, data[field.alias or name])


def reachable(model: type[BaseModel]) -> set[type[BaseModel]]:
    found = {model}
    for field in model.model_fields.values():
        inner = inner_model(field.annotation)
        if inner is not None and inner not in found:
            found |= reachable(inner)
    return found


@pytest.mark.parametrize(
    ("example", "model"), [("reconciler.yaml", ReconcilerConfig), ("bind-api.yaml", BindApiConfig)]
)
def test_the_examples_document_every_field(example: str, model: type[BaseModel]) -> None:
    """Each field of each model appears in the example at least once (alternatives such as
    {file}, {env} and {secretRef} in different places)."""
    seen: dict[type[BaseModel], set[str]] = {}
    for found, keys in walk(model, yaml.safe_load((EXAMPLES / example).read_text())):
        seen.setdefault(found, set()).update(keys)
    missing = [
        f"{each.__name__}.{field.alias or name}"
        for each in sorted(reachable(model), key=lambda m: m.__name__)
        for name, field in each.model_fields.items()
        if (field.alias or name) not in seen.get(each, set())
    ]
    assert missing == [], f"{example} lacks {missing}"


def defaulted_keys(model: type[BaseModel], node: yaml.Node) -> Iterator[tuple[str, int]]:
    """Every key of a composed document that sets a field with a scalar default, with its
    line (0-based)."""
    if isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from defaulted_keys(model, item)
        return
    if not isinstance(node, yaml.MappingNode):
        return
    fields = {field.alias or name: field for name, field in model.model_fields.items()}
    for key, value in node.value:
        field = fields.get(key.value)
        if field is None:
            continue
        if isinstance(field.default, str | int | float | bool):
            yield key.value, key.start_mark.line
        if (inner := inner_model(field.annotation)) is not None:
            yield from defaulted_keys(inner, value)


@pytest.mark.parametrize(
    ("example", "model"), [("reconciler.yaml", ReconcilerConfig), ("bind-api.yaml", BindApiConfig)]
)
def test_the_examples_mark_defaults(example: str, model: type[BaseModel]) -> None:
    """A line setting a field that has a default says "default" in its comment."""
    text = (EXAMPLES / example).read_text()
    lines = text.splitlines()
    unmarked = [
        f"{line + 1}: {key}"
        for key, line in defaulted_keys(model, yaml.compose(text))
        if "default" not in lines[line].partition("#")[2]
    ]
    assert unmarked == []


def spec_schema(crd: Path) -> dict[str, Any]:
    doc = yaml.safe_load(crd.read_text())
    return doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


def nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, child in node.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if "items" in node:
        yield from nodes(node["items"], f"{path}[]")


@pytest.mark.parametrize("crd", schemas.CRD_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_crd_spec_is_structural(crd: Path) -> None:
    """What the apiserver requires of a structural schema (checked for real on the local stack
    in tests/integration/test_config_schema_crd.py)."""
    for path, node in nodes(spec_schema(crd)):
        assert "type" in node, f"{path} has no type"
        forbidden = {"$ref", "anyOf", "oneOf", "allOf", "additionalProperties", "uniqueItems"}
        assert not forbidden & set(node), f"{path}: {forbidden & set(node)}"
        assert node.get("default", "") is not None, f"{path}: default null"


def test_helm_refuses_a_typo_and_a_wrong_type_in_the_reconciler_config() -> None:
    typo = template([VALUE_SETS["default"]], set_values=["reconciler.config.pollIntervall=1s"])
    assert typo.returncode != 0, "helm rendered reconciler.config.pollIntervall"
    assert "/reconciler/config" in typo.stderr
    assert "pollIntervall" in typo.stderr, typo.stderr
    wrong = template([VALUE_SETS["default"]], set_values=["reconciler.config.workers=four"])
    assert wrong.returncode != 0
    assert "/reconciler/config/workers" in wrong.stderr, wrong.stderr
    good = template([VALUE_SETS["default"]], set_values=["reconciler.config.pollInterval=1m30s"])
    assert good.returncode == 0, good.stderr


def test_the_chart_takes_the_example_config_less_its_own_keys(tmp_path: Path) -> None:
    """Every field of examples/reconciler.yaml that the chart does not set passes the chart's
    schema, and the rendered config passes the model."""
    config = yaml.safe_load((EXAMPLES / "reconciler.yaml").read_text())
    for key in schemas.CHART_OWNED:
        del config[key]
    del config["leaderElection"]["namespace"]
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"reconciler": {"config": config}}))
    result = template([VALUE_SETS["default"], values])
    assert result.returncode == 0, result.stderr
    [config_map] = [
        doc
        for doc in yaml.safe_load_all(result.stdout)
        if doc and doc["kind"] == "ConfigMap" and "reconciler.yaml" in doc.get("data", {})
    ]
    rendered = parse_config(config_map["data"]["reconciler.yaml"], "reconciler.yaml", tmp_path)
    assert [r.name for r in rendered.repositories] == ["team-a", "team-b"]
