"""Offline validation of a claim against the openAPIV3Schema that its export serves.

Kubernetes schemas are OpenAPI v3.0 with extensions; ``jsonschema`` speaks JSON Schema. The schema
is converted once (``CompiledSchema``) and then checks any number of objects, so that a person
hears about a wrong type, a plan that does not exist or a misspelt field at push time, with the
field's path, instead of from a failed apply later.

What is checked: types (``nullable``, ``x-kubernetes-int-or-string``), enums, required fields,
bounds, patterns, ``x-kubernetes-list-type: set`` uniqueness, and unknown fields under every object
that declares ``properties`` unless it has ``x-kubernetes-preserve-unknown-fields`` (as
``kubectl --validate=strict`` does). Not checked: ``x-kubernetes-validations`` (CEL rules such as
"Service is an immutable field" compare with the live object, ``oldSelf``) and ``format``; the
Control Plane's server-side dry-run checks those. ``apiVersion``, ``kind``, ``metadata`` and
``status`` are not validated here: the loader checks the first three itself and drops status.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

IGNORED_FIELDS = frozenset({"apiVersion", "kind", "metadata", "status"})

_VALUE_KEYWORDS = frozenset(
    {
        "type",
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "uniqueItems",
        "minProperties",
        "maxProperties",
        "required",
    }
)
_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
}


class CompiledSchema:
    """One converted schema and its validator; build once, validate many objects."""

    def __init__(self, schema: Mapping[str, Any]) -> None:
        """Raises ``jsonschema.exceptions.SchemaError`` when the schema itself is invalid."""
        converted = to_json_schema(schema)
        Draft202012Validator.check_schema(converted)
        self._validator = Draft202012Validator(converted)

    def errors(self, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Every problem with ``obj`` as (dotted field path, message), in the schema's order."""
        instance = {key: value for key, value in obj.items() if key not in IGNORED_FIELDS}
        found: dict[tuple[str, str], None] = {}
        for error in self._validator.iter_errors(instance):
            found.update(dict.fromkeys(_explain(error)))
        return list(found)


def validate(obj: Mapping[str, Any], schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Problems with ``obj`` under ``schema``; build a ``CompiledSchema`` to check many objects."""
    return CompiledSchema(schema).errors(obj)


def to_json_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema (2020-12) that accepts what the API server would, for a CRD's root schema."""
    root = dict(schema)
    if "properties" in root:
        root["properties"] = {
            name: sub for name, sub in root["properties"].items() if name not in IGNORED_FIELDS
        }
    if "required" in root:
        root["required"] = [name for name in root["required"] if name not in IGNORED_FIELDS]
    return _convert(root, structural=True)


def _convert(node: Mapping[str, Any], structural: bool) -> dict[str, Any]:
    """Convert one schema node; ``structural`` is False inside allOf/anyOf/oneOf/not, which only
    restrict values and so must not forbid fields that the enclosing object declares."""
    return {**_value_rules(node), **_children(node, structural)}


def _value_rules(node: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords that restrict the node's own value, in JSON Schema's spelling."""
    out = {key: value for key, value in node.items() if key in _VALUE_KEYWORDS}
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if node.get(exclusive) is True and bound in out:  # OpenAPI 3.0's boolean form
            out[exclusive] = out.pop(bound)
    if node.get("x-kubernetes-int-or-string") and "type" not in out:
        out["type"] = ["integer", "string"]
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [*_as_list(out["type"]), "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if node.get("x-kubernetes-list-type") == "set":
        out["uniqueItems"] = True
    return out


def _children(node: Mapping[str, Any], structural: bool) -> dict[str, Any]:
    """The converted sub-schemas: properties, items, additionalProperties, combinators."""
    out: dict[str, Any] = {}
    properties = dict(node.get("properties") or {})
    if properties and node.get("x-kubernetes-embedded-resource"):
        for name in ("apiVersion", "kind", "metadata"):
            properties.setdefault(name, {})
    if properties:
        out["properties"] = {name: _convert(sub, structural) for name, sub in properties.items()}
    if isinstance(node.get("items"), Mapping):
        out["items"] = _convert(node["items"], structural)
    additional = node.get("additionalProperties")
    if isinstance(additional, Mapping):
        out["additionalProperties"] = _convert(additional, structural)
    elif isinstance(additional, bool):
        out["additionalProperties"] = additional
    elif structural and properties and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            out[key] = [_convert(sub, structural=False) for sub in node[key]]
    if isinstance(node.get("not"), Mapping):
        out["not"] = _convert(node["not"], structural=False)
    return out


def _as_list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def field_path(parts: Iterable[str | int]) -> str:
    """``spec.items[2].name`` from ("spec", "items", 2, "name")."""
    path = ""
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else part
    return path


def _explain(error: ValidationError) -> list[tuple[str, str]]:
    """One or more (field, message) pairs a developer can act on, for one validator error."""
    parts = list(error.absolute_path)
    field = field_path(parts)
    label = field or "the object"
    # Set on every error a validator yields (jsonschema types them as possibly unset): JSON.
    value: Any = error.validator_value
    instance: Any = error.instance
    schema: Any = error.schema
    if error.validator == "required":
        missing = [field_path([*parts, name]) for name in value if name not in instance]
        return [(path, f"{path} is required") for path in missing]
    if error.validator == "additionalProperties" and value is False:
        known = [str(name) for name in schema.get("properties", {})]
        return [_unknown(parts, str(name), known) for name in instance if name not in known]
    if error.validator == "type":
        expected = _as_list(value)
        wanted = " or ".join(_TYPE_NAMES.get(name, name) for name in expected)
        return [
            (
                field,
                f"{label} must be {wanted}, got {_describe(instance)}"
                f"{_type_hint(instance, expected)}",
            )
        ]
    if error.validator == "enum":
        allowed = ", ".join(_show(item) for item in value)
        return [
            (
                field,
                f"{label} must be one of {allowed}; got {_show(instance)}"
                f"{_suggest(instance, value)}",
            )
        ]
    return [(field, f"{label}: {error.message}")]


def _unknown(parts: list[str | int], name: str, known: list[str]) -> tuple[str, str]:
    path = field_path([*parts, name])
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {field_path([*parts, close[0]])}?" if close else ""
    return path, f"unknown field {path}{hint}"


def _suggest(value: Any, allowed: list[Any]) -> str:
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [v for v in allowed if isinstance(v, str)], n=1)
    return f" (did you mean {_show(close[0])}?)" if close else ""


def _type_hint(value: Any, expected: list[str]) -> str:
    if isinstance(value, bool) and "string" in expected:
        return " (YAML reads unquoted yes/no/on/off/true/false as booleans: quote the value)"
    if isinstance(value, str) and "integer" in expected and value.strip().lstrip("-").isdigit():
        return " (remove the quotes)"
    return ""


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    kind = {bool: "boolean", int: "integer", float: "number", str: "string"}.get(type(value), "")
    return f"{kind} {_show(value)}".strip()


def _show(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
