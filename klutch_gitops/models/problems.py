"""pydantic's ValidationError as a person reads it: one ``path: message — fix`` line per problem,
all of them at once, in one KlutchError naming the file.

Unknown keys name the known fields there and the nearest one (``pollIntervall`` → did you mean
``pollInterval``?); type errors say what YAML read and how to write it instead.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Mapping
from typing import Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from klutch_gitops.errors import KlutchError, yaml_problem

Loc = tuple[int | str, ...]
M = TypeVar("M", bound=BaseModel)

# What to set when a required field is missing, where "set <field>" says too little.
REQUIRED_FIXES = {
    "url": "use a file://, https://, ssh:// or git@host:path URL",
    "consumerNamespace": "name the consumer namespace on the Control Plane",
    "appNamespaces": "list the App Cluster namespaces this repository may write to",
    "kubeconfig": "name the service's own kubeconfig file (its identity is never a Secret)",
    "appCluster": "name a kubeconfig file or a Secret holding one",
    "controlPlane": "name a kubeconfig file or a Secret holding one",
    "issuer": "set oidc.issuer to the OIDC provider's https issuer URL",
    "audiences": "list the OIDC client IDs whose tokens the bind API accepts",
    "clientId": "set the OIDC client ID of the bind API",
    "clientSecret": "set {file: PATH} or {env: VARIABLE} holding the client secret",
    "externalURL": "set the URL browsers reach the bind API at, e.g. https://bind.example.com",
    "name": "set a name",
    "key": "name the key inside the Secret",
}
# The same for the top level of a file.
TOP_LEVEL_FIXES = {
    "controlPlane": "set controlPlane: {kubeconfig: FILE}, the service's own kubeconfig",
    "oidc": "set oidc: {issuer: https://…, audiences: [CLIENT_ID]}",
}


def parse_yaml(text: str, origin: str) -> Any:
    """The YAML document, or a KlutchError naming the file and the syntax error."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KlutchError(
            f"{origin}: not valid YAML: {yaml_problem(error)}", "fix the YAML syntax"
        ) from None


def validate(model: type[M], data: Any, origin: str, fix: str) -> M:
    """``data`` as ``model``, or one KlutchError listing every problem."""
    if data is None:
        data = {}
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise problems_error(origin, problem_lines(error, model), fix) from None


def problems_error(origin: str, lines: list[str], fix: str) -> KlutchError:
    """One problem: ``origin: path: message`` with its fix; several: a list under ``origin``."""
    if len(lines) == 1:
        message, _, own_fix = lines[0].partition(" — ")
        return KlutchError(f"{origin}: {message}", own_fix or fix)
    return KlutchError(f"{origin}: {len(lines)} problem(s):\n  " + "\n  ".join(lines), fix)


def problem_lines(error: ValidationError, model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every error of ``error`` as ``path: message — fix``, paths below ``prefix``."""
    lines = []
    for detail in error.errors(include_url=False):
        loc: Loc = tuple(detail["loc"])
        ctx = detail.get("ctx") or {}
        if detail["type"] == "klutch_many":
            for where, message, fix, _ in ctx["problems"]:
                lines.append(f"{path(prefix, loc, where)}: {message} — {fix}")
            continue
        message, fix = describe(detail, model)
        lines.append(f"{path(prefix, loc)}: {message} — {fix}")
    return lines


def path(prefix: str, loc: Loc, below: str = "") -> str:
    """``repositories[0].pollInterval`` from ``("repositories", 0, "pollInterval")``."""
    text = prefix
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    if below:
        text = f"{text}.{below}" if text else below
    return text or "(the file)"


def describe(detail: Mapping[str, Any], model: type[BaseModel]) -> tuple[str, str]:
    """The message and the fix of one pydantic error."""
    kind, value = detail["type"], detail.get("input")
    ctx = detail.get("ctx") or {}
    key = next((p for p in reversed(detail["loc"]) if isinstance(p, str)), "")
    if kind == "klutch":
        return ctx["message"], ctx["fix"]
    if kind == "missing":
        fixes = TOP_LEVEL_FIXES if len(detail["loc"]) == 1 else REQUIRED_FIXES
        return "is required", fixes.get(key, REQUIRED_FIXES.get(key, f"set {key}"))
    if kind == "extra_forbidden":
        return "unknown field", unknown_field_fix(model, tuple(detail["loc"]))
    if kind in TYPE_ERRORS:
        what, fix = TYPE_ERRORS[kind]
        return f"must be {what}, got {shown(value)}", fix
    if kind in ("greater_than_equal", "less_than_equal", "greater_than", "less_than"):
        low, high = bounds(model, tuple(detail["loc"]))
        return (
            f"{value!r} is not a number from {low} to {high}",
            f"set a number from {low} to {high}",
        )
    if kind == "literal_error":
        expected = ctx.get("expected", "")
        return f"{value!r} is not one of {expected}", f"use one of {expected}"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        what = "a non-empty list" if least == 1 else f"a list of at least {least} items"
        return f"must be {what}", f"list at least {least}"
    if kind == "too_long":
        return f"must hold at most {ctx.get('max_length')} items", "list fewer"
    return detail["msg"], "see the field's description in schemas/"


TYPE_ERRORS = {
    "bool_type": ("true or false", "write true or false, without quotes"),
    "int_type": ("a whole number", "write a number without quotes, e.g. 4"),
    "string_type": ("a string", "write text; quote it if YAML reads it as a number or a date"),
    "list_type": ("a list", "write each item on its own `- ` line"),
    "model_type": ("a mapping", "write it as `key: value` lines"),
    "dict_type": ("a mapping", "write it as `key: value` lines"),
    "model_attributes_type": ("a mapping", "write it as `key: value` lines"),
}


def shown(value: Any) -> str:
    """A value as a message shows it: its repr, or its type for mappings and lists."""
    if isinstance(value, Mapping | list):
        return "a mapping" if isinstance(value, Mapping) else "a list"
    return repr(value)


def unknown_field_fix(model: type[BaseModel], loc: Loc) -> str:
    """Remove it; the nearest known name if one is near; every known name there."""
    known = sorted(aliases(model_at(model, loc[:-1])))
    near = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    hint = f"did you mean {near[0]}? " if near else ""
    return f"{hint}remove it; known fields here: {', '.join(known)}"


def aliases(model: type[BaseModel] | None) -> list[str]:
    if model is None:
        return []
    return [field.alias or name for name, field in model.model_fields.items()]


def bounds(model: type[BaseModel], loc: Loc) -> tuple[Any, Any]:
    """The minimum and maximum of the number field at ``loc``."""
    parent = model_at(model, loc[:-1])
    field = next(f for n, f in parent.model_fields.items() if (f.alias or n) == loc[-1])  # type: ignore[union-attr]
    low = high = None
    for item in field.metadata:
        low = getattr(item, "ge", None) if getattr(item, "ge", None) is not None else low
        high = getattr(item, "le", None) if getattr(item, "le", None) is not None else high
    return low, high


def model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model of the mapping at ``loc`` below ``model`` (list indices skipped)."""
    node: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or node is None:
            continue
        field = next((f for n, f in node.model_fields.items() if (f.alias or n) == part), None)
        node = inner_model(field.annotation) if field is not None else None
    return node


def inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model inside ``X | None``, ``list[X]`` or ``Annotated[X, …]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType, list) or get_args(annotation):
        for arg in get_args(annotation):
            found = inner_model(arg)
            if found is not None:
                return found
    return None
