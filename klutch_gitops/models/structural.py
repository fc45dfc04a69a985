"""JSON Schema as pydantic writes it, turned into what its consumers take: self-contained
subtrees (no ``$ref``) for the chart's values schema, and Kubernetes' structural OpenAPI for a
CRD.

A structural schema (https://kubernetes.io/docs/tasks/extend-kubernetes/custom-resources/
custom-resource-definitions/#specifying-a-structural-schema) gives every node a ``type``, has no
``$ref``, no ``additionalProperties`` beside ``properties`` (unknown fields are pruned, or refused
under ``fieldValidation=Strict``), no ``uniqueItems`` (``x-kubernetes-list-type: set`` instead)
and no ``anyOf`` naming types: an optional field is simply left out, never ``null``.
"""

from __future__ import annotations

from typing import Any

# JSON Schema keywords that a CRD's JSONSchemaProps refuses or a structural schema forbids.
NOT_STRUCTURAL = {"title", "additionalProperties", "uniqueItems", "$schema", "oneOf"}


def inline(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every ``$ref`` to its ``$defs`` replaced by the definition; the keys beside
    a ``$ref`` (a field's description, default) win over the definition's."""
    defs = schema.get("$defs", {})

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        return walk_object(node) if isinstance(node, dict) else node

    def walk_object(node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            target = defs[node["$ref"].rsplit("/", 1)[-1]]
            own = {k: v for k, v in node.items() if k != "$ref"}
            return walk_object({**target, **own})
        return {k: walk(v) for k, v in node.items() if k != "$defs"}

    return walk_object(schema)


def without_titles(node: Any) -> Any:
    """pydantic titles every field with its name again; the descriptions say more."""
    if isinstance(node, list):
        return [without_titles(item) for item in node]
    if not isinstance(node, dict):
        return node
    return {
        k: (
            without_titles(v) if k != "properties" else {p: without_titles(s) for p, s in v.items()}
        )
        for k, v in node.items()
        if k != "title"
    }


def structural(schema: dict[str, Any]) -> dict[str, Any]:
    """An inlined JSON Schema as a CRD's structural OpenAPI v3 schema."""

    def walk(node: Any) -> Any:
        if isinstance(node, list):
            return [walk(item) for item in node]
        return walk_object(node) if isinstance(node, dict) else node

    def walk_object(node: dict[str, Any]) -> dict[str, Any]:
        node = _not_null(node)
        converted = {
            k: walk(v)
            for k, v in node.items()
            if k not in NOT_STRUCTURAL and not (k == "default" and v is None)
        }
        if "properties" in node:
            converted["properties"] = {p: walk(s) for p, s in node["properties"].items()}
        if node.get("uniqueItems"):
            converted["x-kubernetes-list-type"] = "set"
        return converted

    return walk_object(inline(schema))


def _not_null(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, {type: null}]`` (an optional field) as X, keeping the outer keys."""
    options = node.get("anyOf")
    if not options:
        return node
    kept = [option for option in options if option.get("type") != "null"]
    if len(kept) != 1:
        raise ValueError(f"a CRD cannot hold a union of types: {options}")
    outer = {k: v for k, v in node.items() if k != "anyOf"}
    return {**kept[0], **outer}
