"""The manifest model every stage shares: a claim, where it came from, why one was refused.

Data flows one way: the loader turns files into ``Claim`` and ``Rejection`` values, the sync stages
apply claims, the write-back stage reports both. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True, order=True)
class Identity:
    """What makes two documents the same object. The version is not part of it."""

    group: str  # "" for the core group
    kind: str
    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Mapping[str, Any]) -> Identity:
        group = str(obj.get("apiVersion", "")).rpartition("/")[0]
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping):  # a malformed document still gets an identity
            meta = {}
        return cls(
            group,
            str(obj.get("kind", "")),
            str(meta.get("namespace") or ""),
            str(meta.get("name", "")),
        )

    def __str__(self) -> str:
        kind = f"{self.kind}.{self.group}" if self.group else self.kind
        return f"{kind} {self.namespace}/{self.name}" if self.namespace else f"{kind} {self.name}"


@dataclass(frozen=True)
class Location:
    """Where a document lives: a repository-relative POSIX path and its index in the file."""

    file: str
    document: int  # 0-based index among the file's YAML documents
    line: int | None = None  # 1-based line where the document starts

    def __str__(self) -> str:
        line = f":{self.line}" if self.line else ""
        return f"{self.file}{line} (document {self.document + 1})"


@dataclass(frozen=True)
class Claim:
    """One accepted document: a proxy claim the binding exports, without its ``status``."""

    identity: Identity
    api_version: str
    body: Mapping[str, Any]
    location: Location
    git_status: Mapping[str, Any] | None = None  # the status the document holds in Git


@dataclass(frozen=True)
class Rejection:
    """One refused document (or file), reported where a person looks: file, field, fix."""

    file: str
    message: str
    fix: str
    document: int | None = None  # None when the whole file was refused
    field: str | None = None  # dotted path, e.g. "spec.plan" or "metadata.namespace"
    identity: Identity | None = None  # the object the document names, when it names one

    def as_dict(self) -> dict[str, Any]:
        return {
            k: v
            for k, v in (
                ("file", self.file),
                ("document", self.document),
                ("object", str(self.identity) if self.identity else None),
                ("field", self.field),
                ("message", self.message),
                ("fix", self.fix),
            )
            if v is not None
        }


@dataclass(frozen=True)
class Export:
    """An API a binding exports (from an APIServiceExport): the kind and its schema per version."""

    group: str
    kind: str
    plural: str
    scope: str = "Namespaced"
    schemas: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # version -> schema

    @property
    def name(self) -> str:
        """The export's (and the CRD's) name: ``<plural>.<group>``."""
        return f"{self.plural}.{self.group}"

    @classmethod
    def of(cls, api_service_export: Mapping[str, Any]) -> Export:
        spec = api_service_export.get("spec") or {}
        names = spec.get("names") or {}
        return cls(
            group=spec.get("group", ""),
            kind=names.get("kind", ""),
            plural=names.get("plural", ""),
            scope=spec.get("scope", "Namespaced"),
            schemas={
                v["name"]: (v.get("schema") or {}).get("openAPIV3Schema") or {}
                for v in spec.get("versions") or []
                if v.get("served", True)
            },
        )
