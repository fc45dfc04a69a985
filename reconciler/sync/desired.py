"""Desired state: the claims that a folder of a repository asks for, and why any other document
was refused.

Pure logic over a work tree: no cluster, no network. It never raises for bad input, because one bad
file must not stop a repository: every problem becomes a ``Rejection`` naming the file, document,
field and fix, and everything else still loads. Of two definitions of one object the first wins
and stays a claim, so adding a copy can never take a live data service away.
"""

from __future__ import annotations

import difflib
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from jsonschema.exceptions import SchemaError

from klutch_gitops.manifests import Claim, Export, Identity, Location, Rejection
from klutch_gitops.yamlsafe import YamlError, load_documents
from reconciler.sync.schema import CompiledSchema

YAML_SUFFIXES = (".yaml", ".yml")
SKIPPED_DIRECTORIES = frozenset({".git", ".klutch"})
SERVER_METADATA = frozenset(
    {
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "generation",
        "managedFields",
        "selfLink",
        "deletionTimestamp",
    }
)
# Matched by kind alone, so that a wrong group does not hide that the object is cluster-scoped.
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


@dataclass(frozen=True)
class Limits:
    """What one file may cost to read; beyond it the file or the document is refused."""

    max_file_bytes: int = 1 << 20  # files over this are rejected whole
    max_documents: int = 1000  # per file
    max_nodes: int = 100_000  # YAML nodes per document after alias expansion (alias bombs)
    max_depth: int = 64  # nesting depth


@dataclass(frozen=True)
class DesiredState:
    claims: tuple[Claim, ...]  # sorted by (file, document)
    rejections: tuple[Rejection, ...]  # sorted by (file, document)


class _Problem(NamedTuple):
    field: str | None
    message: str
    fix: str


class _Unreadable(Exception):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


@dataclass
class _Rules:
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


def load_desired(
    root: Path,
    path: str,
    exports: Mapping[tuple[str, str], Export],
    allowed_namespaces: frozenset[str] | None = None,
    limits: Limits = Limits(),
) -> DesiredState:
    """The claims under ``root/path`` and every rejection, both sorted by (file, document).

    root: the repository work tree; path: folder inside it ("" or "." = whole repo);
    exports: keyed by (group, kind); allowed_namespaces: None = any namespace.
    """
    root = root.resolve()
    folder = posixpath.normpath(path.strip() or ".")
    try:
        top = Path(os.path.realpath(root / folder))
    except ValueError:  # a NUL byte
        return _refused(
            folder,
            f"the path {folder!r} is not a valid folder name",
            "Bind a folder inside the repository.",
        )
    if not top.is_relative_to(root):
        return _refused(
            folder,
            f"the path {folder} leaves the repository",
            "Bind a folder inside the repository.",
        )
    if not top.exists():
        return _refused(
            folder,
            f"the folder {folder} does not exist in the repository",
            "Create it, or bind the repository with the folder that holds the claims.",
        )
    rules = _Rules(exports, allowed_namespaces)
    files, rejections = _yaml_files(root, top)
    loaded: list[Claim] = []
    for name, file in files:
        claims, refused = _load_file(name, file, rules, limits)
        loaded += claims
        rejections += refused
    claims, duplicates = _first_definitions(loaded)
    rejections += duplicates
    rejections.sort(key=lambda r: (r.file, -1 if r.document is None else r.document))
    return DesiredState(tuple(claims), tuple(rejections))


def _refused(file: str, message: str, fix: str) -> DesiredState:
    return DesiredState((), (Rejection(file, message, fix),))


def _yaml_files(root: Path, top: Path) -> tuple[list[tuple[str, Path]], list[Rejection]]:
    """Every YAML file under ``top`` as (repository path, path to read), sorted by repository path.

    Walks with an explicit stack (no recursion limit to hit) and never follows a linked folder.
    """
    if top.is_file():
        return [(top.relative_to(root).as_posix(), top)], []
    files: list[tuple[str, Path]] = []
    rejections: list[Rejection] = []
    folders = [top]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError as error:
            rejections.append(
                Rejection(
                    folder.relative_to(root).as_posix(),
                    f"cannot read the folder: {error.strerror}",
                    "Check the folder's permissions.",
                )
            )
            continue
        for entry in entries:
            if entry.name in SKIPPED_DIRECTORIES:
                continue
            path = Path(entry.path)
            name = path.relative_to(root).as_posix()
            if entry.is_symlink():
                followed = _follow(root, path, name)
                if isinstance(followed, Rejection):
                    rejections.append(followed)
                elif followed is not None:
                    files.append((name, followed))
            elif entry.is_dir(follow_symlinks=False):
                folders.append(path)
            elif entry.name.endswith(YAML_SUFFIXES) and entry.is_file(follow_symlinks=False):
                files.append((name, path))
    return sorted(files), rejections


def _follow(root: Path, link: Path, name: str) -> Path | Rejection | None:
    """The file a symlink leads to, a Rejection when it must not be read, or None to skip it."""
    target = Path(os.path.realpath(link))
    inside = target.is_relative_to(root)
    if target.is_dir():
        return (
            None
            if inside
            else Rejection(
                name,
                "symlink leaves the repository; linked folders are never followed",
                "Copy the folder into the repository instead of linking to it.",
            )
        )
    if not name.endswith(YAML_SUFFIXES):
        return None
    if not inside:
        return Rejection(
            name,
            "symlink leaves the repository",
            "Replace the symlink with the file itself; files outside the repository "
            "are never read.",
        )
    if SKIPPED_DIRECTORIES.intersection(target.relative_to(root).parts):
        return Rejection(
            name,
            "symlink points into .git or .klutch, which are never read",
            "Replace the symlink with the file itself.",
        )
    if not target.is_file():
        return Rejection(
            name,
            "symlink points to a file that does not exist",
            "Correct the symlink's target or remove the symlink.",
        )
    return target


def _load_file(
    name: str, file: Path, rules: _Rules, limits: Limits
) -> tuple[list[Claim], list[Rejection]]:
    try:
        documents = load_documents(_read(file, limits.max_file_bytes), limits)
    except _Unreadable as error:
        return [], [Rejection(name, error.message, error.fix)]
    except YamlError as error:
        return [], [Rejection(name, error.message, error.fix, error.document)]
    claims: list[Claim] = []
    rejections: list[Rejection] = []
    for document in documents:
        if document.value is None:
            continue
        problems = _problems(document.value, rules)
        identity = _named(document.value)
        rejections += [
            Rejection(name, p.message, p.fix, document.index, p.field, identity) for p in problems
        ]
        if not problems:
            claims.append(_claim(document.value, Location(name, document.index, document.line)))
    return claims, rejections


def _named(value: object) -> Identity | None:
    """The object a rejected document names, if it names one: pruning must spare it."""
    if not isinstance(value, Mapping):
        return None
    identity = Identity.of(value)
    return identity if identity.kind and identity.name else None


def _read(file: Path, limit: int) -> str:
    """The file's text; never reads more than ``limit`` + 1 bytes. Raises _Unreadable."""
    try:
        with file.open("rb") as stream:
            size = os.fstat(stream.fileno()).st_size
            data = b"" if size > limit else stream.read(limit + 1)
    except OSError as error:
        raise _Unreadable(
            f"cannot read the file: {error.strerror}", "Check the file's permissions."
        ) from None
    if max(size, len(data)) > limit:
        raise _Unreadable(
            f"the file has {max(size, len(data))} bytes, more than the limit of {limit}",
            "Split it into smaller files.",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise _Unreadable(
            f"the file is not UTF-8 text: byte 0x{data[error.start]:02x} at line {line}",
            "Save the file as UTF-8.",
        ) from None


def _problems(obj: Any, rules: _Rules) -> list[_Problem]:
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
        _Problem(path or None, message, _schema_fix(path, export, version))
        for path, message in (schema.errors(obj) if schema else [])
    ]
    return [
        *_namespace_problems(obj["metadata"], rules.allowed),
        *_reference_problems(obj.get("spec")),
        *schema_problems,
    ]


def _header_problem(obj: Any) -> _Problem | None:
    if not isinstance(obj, dict):
        return _Problem(
            None,
            f"the document is {_describe(obj)}, not a Kubernetes object",
            "Make it a mapping with apiVersion, kind, metadata and spec; separate "
            "several objects with '---' lines instead of listing them.",
        )
    api_version = obj.get("apiVersion")
    if not _is_text(api_version):
        return _Problem(
            "apiVersion",
            _missing_or_wrong("apiVersion", api_version),
            "Set apiVersion to the kind's group and version, e.g. apiVersion: anynines.com/v1.",
        )
    if api_version.count("/") > 1 or "" in api_version.split("/"):
        return _Problem(
            "apiVersion",
            f"apiVersion {api_version!r} is not <group>/<version>",
            "Set apiVersion to the kind's group and version, e.g. apiVersion: anynines.com/v1.",
        )
    kind = obj.get("kind")
    if not _is_text(kind):
        return _Problem(
            "kind",
            _missing_or_wrong("kind", kind),
            "Set kind to the kind of object, e.g. kind: PostgresqlInstance.",
        )
    return None


def _kind_problem(
    obj: dict[str, Any], exports: Mapping[tuple[str, str], Export]
) -> _Problem | None:
    api_version, kind = obj["apiVersion"], obj["kind"]
    group, _, version = api_version.rpartition("/")
    if group == "" and kind == "Secret":
        return _Problem(
            "kind",
            SECRETS_IN_GIT,
            "Remove the Secret from the repository (and rotate what it held); create "
            "a ServiceBinding and use the credentials Secret it provides.",
        )
    export = exports.get((group, kind))
    cluster_scoped = export.scope == "Cluster" if export else kind in CLUSTER_SCOPED_KINDS
    if cluster_scoped:
        return _Problem(
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
        return _Problem(
            "apiVersion",
            f"{api_version} is not served for "
            f"{_kind_name(group, kind)}; served: {', '.join(served) or 'none'}",
            f"Set apiVersion to {served[0]}."
            if served
            else "Ask the platform team to serve a version of this kind.",
        )
    return None


def _not_exported(group: str, kind: str, exports: Mapping[tuple[str, str], Export]) -> _Problem:
    elsewhere = sorted(g for g, k in exports if k == kind)
    if elsewhere:
        versions = sorted(exports[(elsewhere[0], kind)].schemas)
        example = _api_version(elsewhere[0], versions[0]) if versions else elsewhere[0]
        return _Problem(
            "apiVersion",
            f"{_kind_name(group, kind)} is not exported; {kind} is "
            f"exported as {_kind_name(elsewhere[0], kind)}",
            f"Set apiVersion to {example}.",
        )
    exported = sorted(_kind_name(g, k) for g, k in exports)
    close = difflib.get_close_matches(_kind_name(group, kind), exported, n=1)
    return _Problem(
        "kind",
        f"{_kind_name(group, kind)} is not exported to this App Cluster; exported kinds: "
        f"{', '.join(exported) or 'none yet'}{f'; did you mean {close[0]}?' if close else ''}",
        f"Use one of the exported kinds, or ask the platform team to export {kind} "
        "and bind it with klutch-bind.",
    )


def _name_problem(metadata: Any) -> _Problem | None:
    if not isinstance(metadata, dict):
        return _Problem(
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
        return _Problem(
            "metadata.name",
            _missing_or_wrong("metadata.name", name) + generated,
            "Set metadata.name; it identifies the object across pushes.",
        )
    if len(name) > 253 or not _NAME.fullmatch(name):
        return _Problem(
            "metadata.name",
            f"metadata.name {name!r} is not a valid object name",
            "Use at most 253 lowercase letters, digits, '-' and '.', starting and "
            "ending with a letter or digit.",
        )
    return None


def _namespace_problems(metadata: dict[str, Any], allowed: frozenset[str] | None) -> list[_Problem]:
    namespace = metadata.get("namespace")
    choices = ", ".join(sorted(allowed)) if allowed else ""
    if not _is_text(namespace):
        return [
            _Problem(
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
            _Problem(
                "metadata.namespace",
                f"metadata.namespace {namespace!r} is not a valid namespace name",
                "Use at most 63 lowercase letters, digits and '-', starting and ending "
                "with a letter or digit.",
            )
        ]
    if allowed is not None and namespace not in allowed:
        return [
            _Problem(
                "metadata.namespace",
                f"namespace {namespace!r} is not allowed for this repository; allowed: "
                f"{choices or 'none'}",
                (f"Move the claim to one of: {choices}, or " if choices else "")
                + f"ask the platform team to allow {namespace} for this repository.",
            )
        ]
    return []


def _reference_problems(spec: Any) -> list[_Problem]:
    """Crossplane fields that reach beyond the claim's own composite resource; the Control
    Plane refuses them too (catalog/policies/claim-references.yaml), this says so in Git."""
    if not isinstance(spec, Mapping):
        return []
    return [
        _Problem(f"spec.{name}", message, fix)
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


def _claim(obj: dict[str, Any], location: Location) -> Claim:
    """The document as the object to apply: without status and the fields the server owns."""
    body = {key: value for key, value in obj.items() if key != "status"}
    body["metadata"] = {k: v for k, v in obj["metadata"].items() if k not in SERVER_METADATA}
    status = obj.get("status")
    return Claim(
        Identity.of(obj),
        obj["apiVersion"],
        body,
        location,
        status if isinstance(status, Mapping) else None,
    )


def _first_definitions(claims: list[Claim]) -> tuple[list[Claim], list[Rejection]]:
    """Keep the first claim of each identity; refuse every later copy, naming the first."""
    first: dict[Identity, Claim] = {}
    kept: list[Claim] = []
    rejections: list[Rejection] = []
    for claim in claims:
        original = first.setdefault(claim.identity, claim)
        if original is claim:
            kept.append(claim)
            continue
        rejections.append(
            Rejection(
                claim.location.file,
                f"{claim.identity} is already defined in {original.location}; an object may be "
                "defined only once",
                f"Remove this copy or give it another metadata.name; the definition in "
                f"{original.location.file} stays in effect.",
                claim.location.document,
                "metadata.name",
            )
        )
    return kept, rejections


def _is_text(value: Any) -> bool:
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
