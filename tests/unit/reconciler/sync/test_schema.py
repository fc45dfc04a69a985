"""Offline schema validation: OpenAPI v3 as the API server reads it, errors as people read them."""

from __future__ import annotations

from typing import Any

import pytest
from jsonschema.exceptions import SchemaError

from reconciler.sync.schema import CompiledSchema, field_path, to_json_schema, validate

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "spec"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["service", "plan"],
            "x-kubernetes-validations": [
                {"rule": "self.service == oldSelf.service", "message": "immutable"}
            ],
            "properties": {
                "service": {"type": "string", "enum": ["a9s-postgresql13", "a9s-postgresql15"]},
                "plan": {"type": "string"},
                "replicas": {"type": "integer", "minimum": 0, "exclusiveMinimum": True},
                "timeout": {"x-kubernetes-int-or-string": True},
                "ciphers": {"type": "string", "nullable": True},
                "mode": {"type": "string", "enum": ["a", "b"], "nullable": True},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "tags": {
                    "type": "array",
                    "x-kubernetes-list-type": "set",
                    "items": {"type": "string"},
                },
                "users": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "admin": {"type": "boolean"}},
                    },
                },
                "template": {
                    "type": "object",
                    "x-kubernetes-embedded-resource": True,
                    "properties": {"spec": {"type": "object"}},
                },
                "source": {
                    "type": "object",
                    "properties": {"url": {"type": "string"}, "path": {"type": "string"}},
                    "anyOf": [{"required": ["url"]}, {"required": ["path"]}],
                },
            },
        },
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
    },
}
VALID_SPEC = {"service": "a9s-postgresql13", "plan": "small"}


def errors(spec: dict[str, Any], **top: Any) -> list[tuple[str, str]]:
    return CompiledSchema(SCHEMA).errors({"spec": spec, **top})


def test_a_valid_object_has_no_errors() -> None:
    spec = {
        **VALID_SPEC,
        "replicas": 1,
        "timeout": "30s",
        "ciphers": None,
        "mode": None,
        "labels": {"a": "b"},
        "extra": {"anything": {"goes": [1]}},
        "tags": ["x", "y"],
        "users": [{"name": "app", "admin": False}],
        "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {}, "spec": {}},
        "source": {"path": "/data"},
    }
    assert errors(spec) == []
    assert errors({**VALID_SPEC, "timeout": 30}) == []


def test_apiversion_kind_metadata_and_status_are_not_validated() -> None:
    obj = {"metadata": "not checked here", "status": {"phase": 3, "x": 1}, "spec": VALID_SPEC}
    assert validate(obj, SCHEMA) == []
    converted = to_json_schema(SCHEMA)
    assert converted["required"] == ["spec"]
    assert set(converted["properties"]) == {"spec"}


def test_missing_required_fields() -> None:
    assert errors({}) == [
        ("spec.service", "spec.service is required"),
        ("spec.plan", "spec.plan is required"),
    ]
    assert validate({}, SCHEMA) == [("spec", "spec is required")]


def test_wrong_type_names_field_expected_and_actual() -> None:
    assert errors({**VALID_SPEC, "replicas": "three"}) == [
        ("spec.replicas", 'spec.replicas must be an integer, got string "three"')
    ]


def test_wrong_type_hints_at_yaml_booleans_and_quoted_numbers() -> None:
    ((field, message),) = errors({**VALID_SPEC, "plan": True})
    assert field == "spec.plan"
    assert "got boolean true" in message
    assert "quote the value" in message
    ((_, message),) = errors({**VALID_SPEC, "replicas": "3"})
    assert "remove the quotes" in message


def test_enum_lists_allowed_values_and_suggests_the_closest() -> None:
    assert errors({**VALID_SPEC, "service": "a9s-postgresql51"}) == [
        (
            "spec.service",
            'spec.service must be one of "a9s-postgresql13", "a9s-postgresql15"; '
            'got "a9s-postgresql51" (did you mean "a9s-postgresql15"?)',
        )
    ]


def test_unknown_fields_are_refused_like_kubectl_validate_strict() -> None:
    assert errors({**VALID_SPEC, "plna": "small", "zzz": 1}) == [
        ("spec.plna", "unknown field spec.plna; did you mean spec.plan?"),
        ("spec.zzz", "unknown field spec.zzz"),
    ]
    assert validate({"spec": VALID_SPEC, "specs": {}}, SCHEMA) == [
        ("specs", "unknown field specs; did you mean spec?")
    ]


def test_list_items_are_reported_with_their_index() -> None:
    users = [{"name": "a"}, {"name": "b"}, {"admin": "yes", "nmae": "c"}]
    assert errors({**VALID_SPEC, "users": users}) == [
        ("spec.users[2].name", "spec.users[2].name is required"),
        ("spec.users[2].admin", 'spec.users[2].admin must be a boolean, got string "yes"'),
        (
            "spec.users[2].nmae",
            "unknown field spec.users[2].nmae; did you mean spec.users[2].name?",
        ),
    ]


def test_openapi_extensions() -> None:
    assert errors({**VALID_SPEC, "replicas": 0}) == [
        ("spec.replicas", "spec.replicas: 0 is less than or equal to the minimum of 0")
    ]
    assert errors({**VALID_SPEC, "timeout": 1.5}) == [
        ("spec.timeout", "spec.timeout must be an integer or a string, got number 1.5")
    ]
    assert errors({**VALID_SPEC, "mode": "c"})[0][0] == "spec.mode"
    assert errors({**VALID_SPEC, "plan": None}) == [
        ("spec.plan", "spec.plan must be a string, got null")
    ]
    assert errors({**VALID_SPEC, "tags": ["x", "x"]})[0][0] == "spec.tags"
    assert errors({**VALID_SPEC, "labels": {"a": 1}}) == [
        ("spec.labels.a", "spec.labels.a must be a string, got integer 1")
    ]


def test_value_rules_in_anyof_do_not_forbid_declared_fields() -> None:
    assert errors({**VALID_SPEC, "source": {"url": "x", "path": "y"}}) == []
    ((field, message),) = errors({**VALID_SPEC, "source": {}})
    assert field == "spec.source"
    assert "is not valid under any of the given schemas" in message


def test_cel_rules_are_left_to_the_control_plane() -> None:
    assert "x-kubernetes-validations" not in str(to_json_schema(SCHEMA))


def test_an_invalid_schema_is_refused_when_compiled() -> None:
    with pytest.raises(SchemaError):
        CompiledSchema({"type": "object", "properties": {"a": {"type": "int"}}})


@pytest.mark.parametrize(
    ("parts", "path"),
    [
        ((), ""),
        (("spec",), "spec"),
        (("spec", "items", 2, "name"), "spec.items[2].name"),
        (("spec", "matrix", 0, 1), "spec.matrix[0][1]"),
    ],
)
def test_field_path(parts: tuple[str | int, ...], path: str) -> None:
    assert field_path(parts) == path
