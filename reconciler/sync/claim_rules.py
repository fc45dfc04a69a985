"""What a document must satisfy to be a claim: a namespaced object of an exported kind, with a
valid name, an allowed namespace, no Crossplane reference beyond its own composite resource, and
its kind's schema. Each problem names the field and the fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeGuard

from jsonschema.exceptions import SchemaError

from reconciler.manifests import Export
from reconciler.sync.schema import CompiledSchema

CLUSTER_SCOPED_KINDS = frozenset(
    {
        "Namespace",
        "Node",
        "PersistentVolume",
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "StorageClass",
        "CSIDriver",
        "PriorityClass",
        "IngressClass",
        "RuntimeClass",
        "APIService",
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
        "CertificateSigningRequest",
        "CompositeResourceDefinition",
        "Composition",
        "Provider",
        "Configuration",
        "Function",
    }
)
SECRETS_IN_GIT = (
    "Secrets never belong in Git; credentials reach the App Cluster from the Control Plane"
)
_BACKEND_FIX = "choose the backend with spec.compositionRef.name."
# Crossplane claim fields a repository may not set (why: the policy file's comments).
CROSSPLANE_REFERENCES = {
    "resourceRef": (
        "spec.resourceRef names a composite resource to bind; Crossplane binds each claim to "
        "one of its own, and a claim that names one could take over another tenant's or the "
        "platform's",
        "Remove spec.resourceRef; Crossplane creates the claim's composite resource and records "
        "it on the Control Plane.",
    ),
    "compositionRevisionRef": (
        "spec.compositionRevisionRef pins a revision of a Composition; the platform team rolls "
        "out Composition revisions",
        f"Remove spec.compositionRevisionRef; {_BACKEND_FIX}",
    ),
    "compositionRevisionSelector": (
        "spec.compositionRevisionSelector picks revisions of a Composition; the platform team "
        "rolls out Composition revisions",
        f"Remove spec.compositionRevisionSelector; {_BACKEND_FIX}",
    ),
    "publishConnectionDetailsTo": (
        "spec.publishConnectionDetailsTo names one of the platform's secret stores; a claim's "
        "credentials go only to its own namespace",
        "Remove spec.publishConnectionDetailsTo; name the credentials Secret with "
        "spec.writeConnectionSecretToRef.name, or create a ServiceBinding.",
    ),
}
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_NAME = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_NAMESPACE = re.compile(_DNS_LABEL)


class Problem(NamedTuple):
    field: str | None
    message: str
    fix: str


@dataclass
class Rules:
    """What a document must satisfy; schemas are compiled once per (group, kind, version)."""

    exports: Mapping[tuple[str, str], Export]
    allowed: frozenset[str] | None
    compiled: dict[tuple[str, str, str], CompiledSchema | None] = field(default_factory=dict)

    def schema(self, export: Export, version: str) -> CompiledSchema | None:
        """None when the export's schema cannot be compiled: the claim is then left to the
        Control Plane's dry-run rather than refused, since the claim is not what is wrong."""
        key = (export.group, export.kind, version)
        if key not in self.compiled:
            try:
                self.compiled[key] = CompiledSchema(export.schemas[version])
            except SchemaError:
                self.compiled[key] = None
        return self.compiled[key]


def document_problems(obj: Any, rules: Rules) -> list[Problem]:
    """Everything wrong with one document; empty when it is a claim to apply."""
    problem = (
        _header_problem(obj)
        or _kind_problem(obj, rules.exports)
        or _name_problem(obj.get("metadata"))
    )
    if problem:
        return [problem]
    group, _, version = obj["apiVersion"].rpartition("/")
    export = rules.exports[(group, obj["kind"])]
    schema = rules.schema(export, version)
    schema_problems = [
        Problem(path or None, message, _schema_fix(path, export, version))
        for path, message in (schema.errors(obj) if schema else [])
    ]
    return [
        *_namespace_problems(obj["metadata"], rules.allowed),
        *_reference_problems(obj.get("spec")),
        *schema_problems,
    ]


def _header_problem(obj: Any) -> Problem | None:
    if not isinstance(obj, dict):
        return Problem(
            None,
            f"the document is {_describe(obj)}, not a Kubernetes object",
            "Make it a mapping with apiVersion, kind, metadata and spec; separate "
            "several objects with '---' lines instead of listing them.",
        )
    api_version = obj.get("apiVersion")
    if not _is_text(api_version):
        return Problem(
            "apiVersion",
            _missing_or_wrong("apiVersion", api_version),
            "Set apiVersion to the kind's group and version, e.g. apiVersion: anynines.com/v1.",
        )
    if api_version.count("/") > 1 or "" in api_version.split("/"):
        return Problem(
            "apiVersion",
            f"apiVersion {api_version!r} is not <group>/<version>",
            "Set apiVersion to the kind's group and version, e.g. apiVersion: anynines.com/v1.",
        )
    kind = obj.get("kind")
    if not _is_text(kind):
        return Problem(
            "kind",
            _missing_or_wrong("kind", kind),
            "Set kind to the kind of object, e.g. kind: PostgresqlInstance.",
        )
    return None


def _kind_problem(obj: dict[str, Any], exports: Mapping[tuple[str, str], Export]) -> Problem | None:
    api_version, kind = obj["apiVersion"], obj["kind"]
    group, _, version = api_version.rpartition("/")
    if group == "" and kind == "Secret":
        return Problem(
            "kind",
            SECRETS_IN_GIT,
            "Remove the Secret from the repository (and rotate what it held); create "
            "a ServiceBinding and use the credentials Secret it provides.",
        )
    export = exports.get((group, kind))
    cluster_scoped = export.scope == "Cluster" if export else kind in CLUSTER_SCOPED_KINDS
    if cluster_scoped:
        return Problem(
            "kind",
            f"{_kind_name(group, kind)} is cluster-scoped; a repository "
            "holds only namespaced claims",
            "Remove it: cluster-scoped objects belong to the platform team, not to "
            "an application repository.",
        )
    if export is None:
        return _not_exported(group, kind, exports)
    if version not in export.schemas:
        served = [_api_version(group, v) for v in sorted(export.schemas)]
        return Problem(
            "apiVersion",
            f"{api_version} is not served for "
            f"{_kind_name(group, kind)}; served: {', '.join(served) or 'none'}",
            f"Set apiVersion to {served[0]}."
            if served
            else "Ask the platform team to serve a version of this kind.",
        )
    return None


def _not_exported(group: str, kind: str, exports: Mapping[tuple[str, str], Export]) -> Problem:
    elsewhere = sorted(g for g, k in exports if k == kind)
    if elsewhere:
        versions = sorted(exports[(elsewhere[0], kind)].schemas)
        example = _api_version(elsewhere[0], versions[0]) if versions else elsewhere[0]
        return Problem(
            "apiVersion",
            f"{_kind_name(group, kind)} is not exported; {kind} is "
            f"exported as {_kind_name(elsewhere[0], kind)}",
            f"Set apiVersion to {example}.",
        )
    exported = sorted(_kind_name(g, k) for g, k in exports)
    close = difflib.get_close_matches(_kind_name(group, kind), exported, n=1)
    return Problem(
        "kind",
        f"{_kind_name(group, kind)} is not exported to this App Cluster; exported kinds: "
        f"{', '.join(exported) or 'none yet'}{f'; did you mean {close[0]}?' if close else ''}",
        f"Use one of the exported kinds, or ask the platform team to export {kind} "
        "and bind it with klutch-bind.",
    )


def _name_problem(metadata: Any) -> Problem | None:
    if not isinstance(metadata, dict):
        return Problem(
            "metadata",
            _missing_or_wrong("metadata", metadata, "a mapping"),
            "Add metadata with name and namespace.",
        )
    name = metadata.get("name")
    if not _is_text(name):
        generated = (
            " (metadata.generateName is not supported: every apply would create another object)"
            if "generateName" in metadata
            else ""
        )
        return Problem(
            "metadata.name",
            _missing_or_wrong("metadata.name", name) + generated,
            "Set metadata.name; it identifies the object across pushes.",
        )
    if len(name) > 253 or not _NAME.fullmatch(name):
        return Problem(
            "metadata.name",
            f"metadata.name {name!r} is not a valid object name",
            "Use at most 253 lowercase letters, digits, '-' and '.', starting and "
            "ending with a letter or digit.",
        )
    return None


def _namespace_problems(metadata: dict[str, Any], allowed: frozenset[str] | None) -> list[Problem]:
    namespace = metadata.get("namespace")
    choices = ", ".join(sorted(allowed)) if allowed else ""
    if not _is_text(namespace):
        return [
            Problem(
                "metadata.namespace",
                _missing_or_wrong("metadata.namespace", namespace)
                + "; claims are never put into a default namespace",
                f"Set metadata.namespace to one of: {choices}."
                if choices
                else "Set metadata.namespace to the namespace the claim belongs in.",
            )
        ]
    if len(namespace) > 63 or not _NAMESPACE.fullmatch(namespace):
        return [
            Problem(
                "metadata.namespace",
                f"metadata.namespace {namespace!r} is not a valid namespace name",
                "Use at most 63 lowercase letters, digits and '-', starting and ending "
                "with a letter or digit.",
            )
        ]
    if allowed is not None and namespace not in allowed:
        return [
            Problem(
                "metadata.namespace",
                f"namespace {namespace!r} is not allowed for this repository; allowed: "
                f"{choices or 'none'}",
                (f"Move the claim to one of: {choices}, or " if choices else "")
                + f"ask the platform team to allow {namespace} for this repository.",
            )
        ]
    return []


def _reference_problems(spec: Any) -> list[Problem]:
    """Crossplane fields that reach beyond the claim's own composite resource; the Control
    Plane refuses them too (catalog/policies/claim-references.yaml), this says so in Git."""
    if not isinstance(spec, Mapping):
        return []
    return [
        Problem(f"spec.{name}", message, fix)
        for name, (message, fix) in CROSSPLANE_REFERENCES.items()
        if name in spec
    ]


def _schema_fix(path: str, export: Export, version: str) -> str:
    parent = re.sub(r"\[\d+\]", "", path).rpartition(".")[0]
    explain = f"{export.plural}.{parent}" if parent else export.plural
    return (
        f"Correct {path or 'the object'} to fit the schema of "
        f"{_kind_name(export.group, export.kind)} {version}; `kubectl explain {explain}` "
        "lists the fields it accepts."
    )


def _is_text(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and value != ""


def _missing_or_wrong(path: str, value: Any, expected: str = "text") -> str:
    if value is None or value == "":
        return f"{path} is missing"
    return f"{path} must be {expected}, not {_describe(value)}"


def _describe(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return f"{type(value).__name__} {value!r}"


def _kind_name(group: str, kind: str) -> str:
    return f"{kind}.{group}" if group else kind


def _api_version(group: str, version: str) -> str:
    return f"{group}/{version}" if group else version
