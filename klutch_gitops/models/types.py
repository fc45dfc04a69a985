"""The building blocks every config model shares: a strict base, one Duration, checked names and
addresses, and references to secrets (never the secrets themselves).

Each check raises ``problem(message, fix)``, so the error a person sees names the value, what is
wrong, and the fix (``models.problems`` turns them into ``path: message — fix`` lines). Each type
carries the JSON Schema that the editors' schema, the chart's values schema and the CRD publish.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Annotated, Any

from annotated_types import GroupedMetadata
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    PlainValidator,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

# The one duration syntax: Go's time.ParseDuration without its sign and µs/ns units, so a value
# the CRD accepts (``1m30s``) is one the model accepts and the reverse.
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_COMPONENT = r"[0-9]+(\.[0-9]+)?(ms|s|m|h)"
DURATION_PATTERN = rf"^({_COMPONENT})+$"
_PARTS = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
# The same, with at least one component above zero: RE2 (Kubernetes, Helm) has no lookahead.
_POSITIVE = r"([0-9]*[1-9][0-9]*(\.[0-9]+)?|[0-9]+\.[0-9]*[1-9][0-9]*)(ms|s|m|h)"
POSITIVE_DURATION_PATTERN = rf"^({_COMPONENT})*{_POSITIVE}({_COMPONENT})*$"
DURATION_MAX_LENGTH = 32
DURATION_FIX = "write a duration like 500ms, 30s, 5m, 1h or 1m30s"

NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"  # a DNS label: namespaces, Leases
NAME_FIX = "use lowercase letters, digits and '-', at most 63"
ENV_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"
_PORT = r"([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
LISTEN_PATTERN = rf"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]{{0,251}}[A-Za-z0-9])?)?:{_PORT}$"


def problem(message: str, fix: str) -> PydanticCustomError:
    """A validation error that carries its fix."""
    return PydanticCustomError("klutch", "{message}", {"message": message, "fix": fix})


Rule = tuple[str, str, str, tuple[str, ...]]  # (field below the model or "", message, fix, uses)


def problems(found: list[Rule]) -> PydanticCustomError:
    """The problems a model's rules across fields found; each names the fields it ``uses``, so
    it is still reported when other fields are invalid, unless it uses one of those."""
    text = "; ".join(f"{where or '.'}: {message}" for where, message, _, _ in found)
    return PydanticCustomError("klutch_many", "{message}", {"message": text, "problems": found})


class Strict(BaseModel):
    """The base of every config model: no string becomes a boolean or a number, unknown keys are
    refused, and fields are read by their camelCase names."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )

    @model_validator(mode="wrap")
    @classmethod
    def _rules_despite_field_errors(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        """Every problem at once: the rules across fields (``rules``) run too when fields are
        invalid, on the mapping without the invalid and unknown keys."""
        try:
            model = handler(data)
        except ValidationError as error:
            raise with_rules(data, handler, error) from None
        if found := model.rules():
            raise problems(found)
        return model

    def rules(self) -> list[Rule]:
        """The problems across this model's fields; none by default."""
        return []


def with_rules(data: Any, handler: ValidatorFunctionWrapHandler, error: ValidationError) -> Any:
    """``error`` plus the rules' problems that use none of the failed keys."""
    details = error.errors(include_url=False)
    failed = {d["loc"][0] for d in details if d["loc"]}
    if not isinstance(data, Mapping) or not failed:
        return error
    try:
        found = [
            rule
            for rule in handler({k: v for k, v in data.items() if k not in failed}).rules()
            if not failed & set(rule[3])
        ]
    except ValidationError:
        return error
    if not found:
        return error
    return ValidationError.from_exception_data(
        error.title,
        [*(again(d) for d in details), again({"loc": (), "input": data, **_many(found)})],
    )


def _many(found: list[Rule]) -> dict[str, Any]:
    custom = problems(found)
    return {"type": custom.type, "msg": custom.message(), "ctx": custom.context}


def again(detail: Any) -> Any:
    """An error of ``ValidationError.errors()`` as ``from_exception_data`` takes it."""
    kind = detail["type"]
    if kind in ("klutch", "klutch_many"):
        kind = PydanticCustomError(kind, "{message}", detail["ctx"])
    shaped = {"type": kind, "loc": detail["loc"], "input": detail["input"]}
    if "ctx" in detail and not isinstance(kind, PydanticCustomError):
        shaped["ctx"] = detail["ctx"]
    return shaped


def parse_duration(value: object) -> float:
    """Seconds of a positive duration such as ``500ms``, ``30s`` or ``1m30s``."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise problem(f"must be a duration like 30s, got {value!r}", DURATION_FIX)
    if len(value) > DURATION_MAX_LENGTH or not re.match(DURATION_PATTERN, value):
        raise problem(f"{value!r} is not a duration", DURATION_FIX)
    seconds = sum(float(number) * DURATION_UNITS[unit] for number, unit in _PARTS.findall(value))
    if seconds <= 0:
        raise problem(f"{value!r} must be above 0", "write a duration above 0, e.g. 30s")
    return seconds


Duration = Annotated[
    float,
    PlainValidator(parse_duration),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": POSITIVE_DURATION_PATTERN,
            "maxLength": DURATION_MAX_LENGTH,
        }
    ),
]


class Checked(GroupedMetadata):
    """A string check as ``Annotated`` metadata: ``Annotated[str, Checked(check, schema)]`` is a
    string type whose ``check`` returns (message, fix) for a bad value, else None; ``schema`` is
    the JSON Schema it publishes. pydantic unpacks it into a validator and that schema."""

    def __init__(
        self, check: Callable[[str], tuple[str, str] | None], schema: dict[str, Any]
    ) -> None:
        self.check = check
        self.schema = schema

    def __iter__(self) -> Iterator[object]:
        yield AfterValidator(self._validate)
        yield WithJsonSchema({"type": "string", **self.schema})

    def _validate(self, value: str) -> str:
        if not value:
            raise problem("must not be empty", "set a value or leave the field out")
        if (found := self.check(value)) is not None:
            raise problem(*found)
        return value


def matching(pattern: str, fix: str, *, max_length: int = 253) -> Checked:
    """A string matching ``pattern`` (searched, as JSON Schema does), at most ``max_length``:
    ``Annotated[str, matching(...)]``."""
    compiled = re.compile(pattern)

    def check(value: str) -> tuple[str, str] | None:
        if len(value) > max_length:
            return f"{value[:80]!r} is longer than {max_length} characters", fix
        return None if compiled.search(value) else (f"{value!r} is not valid", fix)

    return Checked(check, {"pattern": pattern, "maxLength": max_length, "minLength": 1})


Name = Annotated[str, matching(NAME_PATTERN, NAME_FIX, max_length=63)]
Text = Annotated[str, matching(r".", "set a value", max_length=4096)]  # any non-empty string
EnvName = Annotated[
    str, matching(ENV_PATTERN, "name an environment variable, e.g. TEAM_A_TOKEN", max_length=256)
]
Listen = Annotated[
    str,
    matching(
        LISTEN_PATTERN,
        "write host:port, e.g. 0.0.0.0:8080 or 127.0.0.1:8443 (port 0 to 65535)",
        max_length=260,
    ),
]
