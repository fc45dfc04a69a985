"""The catalog: every file parses, the XRDs are named and shaped as Klutch's, Compositions and
templates point at them, and every example claim passes its XRD's schema offline."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from klutch_gitops.catalog import (
    CATALOG_DIR,
    COMPOSITION_DIR,
    PRODUCTION_BACKENDS,
    load_catalog,
    load_compositions,
    load_examples,
    load_templates,
    load_xrds,
)
from klutch_gitops.consumer import PROVIDER_SECRETS
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.crds import CRD_DIR
from reconciler.sync.schema import CompiledSchema, validate

GROUP = "anynines.com"
# claim kind -> (plural, default composition, every composition Klutch names for it)
KINDS = {
    "PostgresqlInstance": ("postgresqlinstances", "a8s-postgresql", {"a9s-postgresql"}),
    "KeyvalueInstance": ("keyvalueinstances", "a9s-keyvalue", set()),
    "Logme2Instance": ("logme2instances", "a9s-logme2", set()),
    "MariadbInstance": ("mariadbinstances", "a9s-mariadb", set()),
    "MessagingInstance": ("messaginginstances", "a9s-messaging", set()),
    "MongodbInstance": ("mongodbinstances", "a9s-mongodb", set()),
    "PrometheusInstance": ("prometheusinstances", "a9s-prometheus", set()),
    "SearchInstance": ("searchinstances", "a9s-search", set()),
    "ServiceBinding": ("servicebindings", "a8s-servicebinding", {"a9s-servicebinding"}),
    "Backup": ("backups", "a8s-backup", {"a9s-backup"}),
    "Restore": ("restores", "a8s-restore", {"a9s-restore"}),
}
INSTANCES = sorted(kind for kind in KINDS if kind.endswith("Instance"))
TRANSITION = "Transition from bigger to smaller plan size is not supported."
SSL = "Plan migrations not possible from Non-SSL to SSL and SSL to Non-SSL"
TO_SINGLE = "Migration from clustered to single Data Service Instance is not supported."
TYPE = "Selected service instance type is not supported."
# Klutch's messages, each on the kind that has the rule.
MESSAGES = {
    "PostgresqlInstance": {
        "Service is an immutable field",
        TRANSITION,
        SSL,
        TO_SINGLE,
        "Plan migrations not possible from Non-Bionic to Bionic and Bionic to Non-Bionic",
        "Bionic plans are only supported by a9s PostgreSQL 13",
        "Unsupported service used for postgresql",
        "Unsupported plan used for postgresql",
        *(
            f"parameters.{name} is not supported for a9s-postgresql"
            for name in ("maxLocksPerTransaction", "sslCiphers", "sslMinProtocolVersion")
        ),
        *(
            f"parameters.{name} is not supported for a8s-postgresql"
            for name in (
                "dataChecksums",
                "effectiveCacheSize",
                "workMem",
                "maintenanceWorkMem",
                "idleInTransactionSessionTimeout",
                "rolePrivileges",
                "walLevelLogical",
            )
        ),
    },
    "KeyvalueInstance": {
        "Service is an immutable field",
        TRANSITION,
        SSL,
        TO_SINGLE,
        "Migration from single to clustered Data Service Instance is not supported.",
        "parameters.failoverTimeout is only supported for clustered plans",
    },
    "Logme2Instance": {
        "Service is an immutable field",
        TO_SINGLE,
        "Migration from single to clustered Data Service Instance is not supported.",
    },
    "MariadbInstance": {
        "Service is an immutable field",
        TRANSITION,
        SSL,
        "Migration from replicated to single Data Service Instance is not supported.",
        "MariaDB v10.11 only supports ssl plans",
    },
    "MessagingInstance": {"Service is an immutable field", TRANSITION, SSL, TO_SINGLE},
    "MongodbInstance": {
        "Service is an immutable field",
        TRANSITION,
        SSL,
        "Migration from replicated to single Data Service Instance is not supported.",
        "must be 'off' or an integer >= 0",
    },
    "PrometheusInstance": {
        "Service is an immutable field",
        "Upgrade functionality for Prometheus plans is not supported",
    },
    "SearchInstance": {"Service is an immutable field", TRANSITION, TO_SINGLE},
    "ServiceBinding": {TYPE},
    "Backup": {TYPE},
    "Restore": {TYPE, "restores without instance ref are not supported for a8s"},
}
# The spec fields Crossplane adds to every claim CRD it generates from an XRD.
CLAIM_FIELDS: dict[str, Any] = {
    "compositionRef": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}},
    },
    "compositionSelector": {
        "type": "object",
        "required": ["matchLabels"],
        "properties": {
            "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}
        },
    },
    "compositionUpdatePolicy": {"type": "string", "enum": ["Automatic", "Manual"]},
    "compositeDeletePolicy": {"type": "string", "enum": ["Background", "Foreground"]},
    "resourceRef": {
        "type": "object",
        "required": ["apiVersion", "kind", "name"],
        "properties": {name: {"type": "string"} for name in ("apiVersion", "kind", "name")},
    },
    "writeConnectionSecretToRef": {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string"}},
    },
}

XRDS = {xrd["spec"]["claimNames"]["kind"]: xrd for xrd in load_xrds()}
COMPOSITIONS = load_compositions()
TEMPLATES = {template["metadata"]["name"]: template for template in load_templates()}
EXAMPLES = load_examples()


def schema_of(xrd: dict[str, Any]) -> dict[str, Any]:
    return xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def claim_schema(kind: str) -> dict[str, Any]:
    """The schema of the claim CRD Crossplane generates: the XRD's, plus its claim fields."""
    schema = copy.deepcopy(schema_of(XRDS[kind]))
    schema["properties"]["spec"]["properties"].update(copy.deepcopy(CLAIM_FIELDS))
    return schema


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node below ``schema`` (object properties and list items), with its path."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}".lstrip("."))
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")


def resolves(schema: dict[str, Any], dotted: str) -> bool:
    """Whether ``spec.a.b`` names a field the schema declares (or lets through, unknown)."""
    node = schema
    for part in dotted.split("."):
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return True
        if part not in node.get("properties", {}):
            return False
        node = node["properties"][part]
    return True


def patches(composition: dict[str, Any]) -> list[dict[str, Any]]:
    (step,) = composition["spec"]["pipeline"]
    return [patch for resource in step["input"]["resources"] for patch in resource["patches"]]


def composite_paths(composition: dict[str, Any]) -> list[str]:
    """The composite's fields a composition reads (spec) or writes (status)."""
    return [
        patch["toFieldPath" if patch.get("type") == "ToCompositeFieldPath" else "fromFieldPath"]
        for patch in patches(composition)
    ]


def claim_kind(composition: dict[str, Any]) -> str:
    return composition["spec"]["compositeTypeRef"]["kind"].removeprefix("X")


def test_every_catalog_file_is_one_or_more_named_objects() -> None:
    folders = ("xrds", "compositions", "templates", "examples")  # crds/, dev/: test_crds.py
    files = [path for folder in folders for path in sorted((CATALOG_DIR / folder).rglob("*"))]
    assert {path.relative_to(CATALOG_DIR).parts[0] for path in files} == set(folders)
    for path in (path for path in files if path.is_file()):
        assert path.suffix == ".yaml", path
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
        assert documents, path
        for doc in documents:
            assert {"apiVersion", "kind", "metadata"} <= doc.keys(), path
            assert doc["metadata"]["name"], path


def test_there_is_one_xrd_per_klutch_claim_kind() -> None:
    assert sorted(XRDS) == sorted(KINDS)
    assert len(load_xrds()) == len(KINDS)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_xrd_is_named_and_versioned_as_klutchs(kind: str) -> None:
    plural, default, _ = KINDS[kind]
    xrd = XRDS[kind]
    assert xrd["apiVersion"] == "apiextensions.crossplane.io/v1"
    assert xrd["kind"] == "CompositeResourceDefinition"
    assert xrd["metadata"]["name"] == f"x{plural}.{GROUP}"
    spec = xrd["spec"]
    assert spec["group"] == GROUP
    assert spec["names"] == {"kind": f"X{kind}", "plural": f"x{plural}"}
    assert spec["claimNames"] == {"kind": kind, "plural": plural}
    assert spec["defaultCompositionRef"] == {"name": default}
    assert spec.get("defaultCompositeDeletePolicy") == ("Foreground" if kind in INSTANCES else None)
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["referenceable"]) == ("v1", True, True)
    schema = schema_of(xrd)
    assert schema["type"] == "object"
    assert set(schema["properties"]) == {"spec", "status"}
    assert schema["properties"]["status"]["properties"]["managed"] == {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_xrd_schema_is_structural_and_compiles(kind: str) -> None:
    CompiledSchema(claim_schema(kind))  # raises SchemaError when jsonschema cannot use it
    for path, node in nodes(schema_of(XRDS[kind])):
        assert "type" in node or node.get("x-kubernetes-int-or-string"), f"{path} has no type"
        if "properties" in node:
            assert node["type"] == "object", path
        for rule in node.get("x-kubernetes-validations", []):
            assert set(rule) == {"rule", "message"}, path
            assert all(rule.values()), path


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_xrd_carries_klutchs_validation_messages(kind: str) -> None:
    messages = {
        rule["message"]
        for _, node in nodes(schema_of(XRDS[kind]))
        for rule in node.get("x-kubernetes-validations", [])
    }
    assert MESSAGES[kind] <= messages


def test_instances_require_service_and_plan_and_keep_their_service() -> None:
    for kind in INSTANCES:
        spec = schema_of(XRDS[kind])["properties"]["spec"]
        assert spec["required"] == ["service", "plan"]
        service = spec["properties"]["service"]
        assert service["x-kubernetes-validations"] == [
            {"message": "Service is an immutable field", "rule": "self == oldSelf"}
        ]


def test_compositions_are_klutchs_pipelines_for_the_xrds() -> None:
    names = {composition["metadata"]["name"] for composition in COMPOSITIONS}
    assert names == {name for _, default, others in KINDS.values() for name in {default, *others}}
    assert len(names) == len(COMPOSITIONS)
    for composition in COMPOSITIONS:
        name, spec = composition["metadata"]["name"], composition["spec"]
        assert spec["compositeTypeRef"]["apiVersion"] == f"{GROUP}/v1", name
        assert claim_kind(composition) in XRDS, name
        assert spec["mode"] == "Pipeline", name
        (step,) = spec["pipeline"]
        assert step["functionRef"] == {"name": "function-patch-and-transform"}, name
        assert (step["input"]["apiVersion"], step["input"]["kind"]) == (
            "pt.fn.crossplane.io/v1beta1",
            "Resources",
        ), name
        assert [resource["name"] for resource in step["input"]["resources"]] == [name]


@pytest.mark.parametrize(
    "composition", COMPOSITIONS, ids=[c["metadata"]["name"] for c in COMPOSITIONS]
)
def test_composition_patches_name_fields_the_xrd_has(composition: dict[str, Any]) -> None:
    schema = claim_schema(claim_kind(composition))
    for path in composite_paths(composition):
        assert path.startswith(("spec.", "status.", "metadata.labels[crossplane.io/claim-")), path
        if not path.startswith("metadata."):
            assert resolves(schema, path), f"{path} is not a field of X{claim_kind(composition)}"
    for patch in patches(composition):
        for transform in patch.get("transforms", []):
            assert transform["type"] in {"string", "map", "convert"}
            if transform["type"] == "string":
                assert transform["string"]["type"] in {"Format", "TrimPrefix", "Regexp", "Convert"}


@pytest.mark.parametrize("kind", INSTANCES)
def test_every_parameter_reaches_a_backend(kind: str) -> None:
    parameters = schema_of(XRDS[kind])["properties"]["spec"]["properties"]["parameters"]
    read = {
        path.split(".")[2]
        for composition in COMPOSITIONS
        if claim_kind(composition) == kind
        for path in composite_paths(composition)
        if path.startswith("spec.parameters.")
    }
    assert read == set(parameters["properties"])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_template_offers_the_kind_with_klutchs_permission_claims(kind: str) -> None:
    plural = KINDS[kind][0]
    template = TEMPLATES[plural]
    assert template["apiVersion"] == "example-backend.klutch.anynines.com/v1alpha1"
    assert template["kind"] == "APIServiceExportTemplate"
    assert template["metadata"] == {"name": plural, "namespace": "crossplane-system"}
    assert template["spec"]["APIServiceSelector"] == {"group": GROUP, "resource": plural}
    claims = template["spec"].get("permissionClaims", [])
    if kind in INSTANCES or kind == "ServiceBinding":
        assert PROVIDER_SECRETS in claims  # connection Secrets reach the App Cluster
    else:
        assert claims == []
    crd = yaml.safe_load(
        (CRD_DIR / "example-backend.klutch.anynines.com_apiserviceexporttemplates.yaml").read_text()
    )
    assert validate(template, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]) == []


def test_there_is_one_template_per_kind() -> None:
    assert sorted(TEMPLATES) == sorted(plural for plural, _, _ in KINDS.values())


@pytest.mark.parametrize(
    "example", EXAMPLES, ids=[f"{e['kind']}/{e['metadata']['name']}" for e in EXAMPLES]
)
def test_example_claim_passes_its_xrd_schema(example: dict[str, Any]) -> None:
    assert example["apiVersion"] == f"{GROUP}/v1"
    assert "namespace" not in example["metadata"]  # applied into the namespace one chooses
    assert validate(example, claim_schema(example["kind"])) == []


def test_examples_cover_every_kind_and_every_parameter() -> None:
    names = [(example["kind"], example["metadata"]["name"]) for example in EXAMPLES]
    assert len(set(names)) == len(names)  # all of them fit in one namespace
    assert {kind for kind, _ in names} == set(KINDS)
    for kind in INSTANCES:
        specs = [example["spec"] for example in EXAMPLES if example["kind"] == kind]
        assert any("parameters" not in spec for spec in specs), kind
        used = {name for spec in specs for name in spec.get("parameters", {})}
        declared = schema_of(XRDS[kind])["properties"]["spec"]["properties"]["parameters"]
        assert used == set(declared["properties"]), kind
    for kind, (_, default, others) in KINDS.items():  # every composition, the default unnamed
        used = {
            example["spec"].get("compositionRef", {}).get("name", default)
            for example in EXAMPLES
            if example["kind"] == kind
        }
        assert used == {default, *others}, kind


@pytest.mark.parametrize(
    ("kind", "spec", "field", "message"),
    [
        (
            "KeyvalueInstance",
            {"service": "a9s-keyvalue8", "plan": "keyvalue-single-tiny-ssl"},
            "spec.plan",
            "did you mean",
        ),
        ("MessagingInstance", {"service": "a9s-messaging4"}, "spec.plan", "is required"),
        (
            "PostgresqlInstance",
            {"service": "a9s-postgresql14", "plan": "postgresql-single-small", "expose": "Public"},
            "spec.expose",
            "must be one of",
        ),
        (
            "PostgresqlInstance",
            {"service": "a9s-postgresql14", "plan": "x", "parameters": {"maxConection": 5}},
            "spec.parameters.maxConection",
            "did you mean spec.parameters.maxConnections",
        ),
        (
            "PostgresqlInstance",
            {"service": "a9s-postgresql14", "plan": "x", "parameters": {"trackIoTiming": False}},
            "spec.parameters.trackIoTiming",
            "quote the value",
        ),
        (
            "MessagingInstance",
            {
                "service": "a9s-messaging4",
                "plan": "messaging-single-small",
                "parameters": {"consumerTimeout": 60},
            },
            "spec.parameters.consumerTimeout",
            "1800000",
        ),
        ("ServiceBinding", {"serviceInstanceType": "postgresql"}, "spec.instanceRef", "required"),
        (
            "Backup",
            {"instanceRef": "db", "serviceInstanceType": "mysql"},
            "spec.serviceInstanceType",
            "must be one of",
        ),
        (
            "Restore",
            {"instanceRef": "db", "serviceInstanceType": "postgresql"},
            "spec.backupRef",
            "required",
        ),
        (
            "PostgresqlInstance",
            {"service": "a9s-postgresql14", "plan": "x", "compositionRef": {}},
            "spec.compositionRef.name",
            "is required",
        ),
    ],
)
def test_schema_refuses_claims_offline(
    kind: str, spec: dict[str, Any], field: str, message: str
) -> None:
    claim = {"apiVersion": f"{GROUP}/v1", "kind": kind, "metadata": {"name": "x"}, "spec": spec}
    errors = validate(claim, claim_schema(kind))
    assert any(path == field and message in text for path, text in errors), errors


def test_loader_reads_backends_by_folder_and_in_apply_order() -> None:
    assert {path.name for path in COMPOSITION_DIR.iterdir()} >= set(PRODUCTION_BACKENDS)
    assert [c["metadata"]["name"] for c in load_compositions(["a8s"])] == [
        "a8s-backup",
        "a8s-postgresql",
        "a8s-restore",
        "a8s-servicebinding",
    ]
    kinds = [doc["kind"] for doc in load_catalog()]
    assert kinds == sorted(
        kinds,
        key=["CompositeResourceDefinition", "Composition", "APIServiceExportTemplate"].index,
    )
    with pytest.raises(KlutchError, match="no compositions for backend 'a7s'"):
        load_compositions(["a7s"])
