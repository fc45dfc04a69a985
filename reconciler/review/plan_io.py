"""The I/O of ``klutch-gitops plan``: both trees from Git, exports and dry-runs from the clusters.

The base is the base commit's tree; the other side is the tree Git's own merge would produce
(``git merge-tree --write-tree``), so a branch behind its base does not look like it reverts the
base's newer changes. Trees are checked out into a temporary folder through a private index and
read by the reconciler's loader, exactly as the reconciler reads its clone.

Per binding: the exports (kinds and schemas) come from the consumer's APIServiceExports on the
Control Plane; without a Control Plane, from the catalog (the claim CRDs Crossplane makes of its
XRDs), and nothing is dry-run. Every created or changed claim is server-side applied with
``dryRun=All`` into its mapped Control Plane namespace with the binding's own credentials, the
reconciler's field manager and force, as the reconciler would apply it: the live object is the
old one, so CEL transition rules (``oldSelf``) run. Deletions are checked for deletion protection
in Git and, with an App Cluster, on the live App claim.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    REPOSITORY_BINDINGS,
    mapped_namespace,
)
from klutch_gitops.catalog import load_xrds
from klutch_gitops.config import Config, RegistrationSpec, SecretRef
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError, Resource, api_client
from klutch_gitops.repository_config import from_repository_binding
from klutch_gitops.urls import InvalidRepoURL, normalize_repo_url
from reconciler.git.local import LocalRepository
from reconciler.git.runner import GitFailed
from reconciler.manifests import Claim, Export, Identity
from reconciler.review import plan
from reconciler.sync import objects
from reconciler.sync.connection import Resolver
from reconciler.sync.desired import load_desired

# The spec fields Crossplane adds to every claim CRD it makes of an XRD (internal/xcrd).
_NAME_REF = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
_LABELS = {"type": "object", "additionalProperties": {"type": "string"}}
_SELECTOR = {"type": "object", "required": ["matchLabels"], "properties": {"matchLabels": _LABELS}}
CLAIM_SPEC_FIELDS: dict[str, Any] = {
    "compositionRef": _NAME_REF,
    "compositionSelector": _SELECTOR,
    "compositionRevisionRef": _NAME_REF,
    "compositionRevisionSelector": _SELECTOR,
    "compositionUpdatePolicy": {"type": "string", "enum": ["Automatic", "Manual"]},
    "compositeDeletePolicy": {"type": "string", "enum": ["Background", "Foreground"]},
    "resourceRef": {
        "type": "object",
        "required": ["apiVersion", "kind", "name"],
        "properties": {key: {"type": "string"} for key in ("apiVersion", "kind", "name")},
    },
    "publishConnectionDetailsTo": {
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": {"type": "string"},
            "configRef": {"type": "object", "properties": {"name": {"type": "string"}}},
            "metadata": {
                "type": "object",
                "properties": {
                    "labels": _LABELS,
                    "annotations": _LABELS,
                    "type": {"type": "string"},
                },
            },
        },
    },
    "writeConnectionSecretToRef": _NAME_REF,
}


@dataclass(frozen=True)
class Target:
    """One binding to plan: a folder of the repository and where its claims go."""

    name: str
    path: str = "."
    consumer_namespace: str | None = None  # None: offline, with the catalog's schemas
    app_namespaces: frozenset[str] | None = None  # None: any namespace
    control_plane: Kube | None = None  # the binding's own identity
    app: Kube | None = None  # for deletion protection set on live App claims


def run_plan(repo: Path, base: str, head: str, targets: Sequence[Target]) -> plan.Plan:
    """The plan of merging ``head`` into ``base`` in the repository at ``repo``, per target.

    Raises KlutchError when Git cannot give both trees (unknown refs, conflicts) or a cluster
    cannot be asked; findings about the claims are in the plan, never raised.
    """
    repository = LocalRepository(repo)
    try:
        repository.check()
    except GitFailed as error:
        raise KlutchError(
            f"{repo} is not a Git repository: {error.message}",
            "pass --repo a clone that holds both commits",
        ) from None
    base_commit, head_commit = repository.commit(base), repository.commit(head)
    merged = repository.merge_tree(base_commit, head_commit)
    with tempfile.TemporaryDirectory(prefix="klutch-plan-") as scratch:
        before = repository.write_tree(base_commit, Path(scratch) / "base")
        after = repository.write_tree(merged, Path(scratch) / "merge")
        bindings = tuple(_plan_target(target, before, after) for target in targets)
    return plan.Plan(base_commit, head_commit, merged, bindings, base_ref=base, head_ref=head)


def _plan_target(target: Target, before: Path, after: Path) -> plan.BindingPlan:
    if target.control_plane is not None and target.consumer_namespace:
        exports = _exports(target.control_plane, target.consumer_namespace)
        notes = [
            f"Checked against the APIs exported to {target.consumer_namespace} and by a "
            "server-side dry-run on the Control Plane."
        ]
    else:
        exports = catalog_exports()
        notes = ["Offline: checked against the catalog's schemas; no Control Plane dry-run."]
    base = load_desired(before, target.path, exports, target.app_namespaces)
    head = load_desired(after, target.path, exports, target.app_namespaces)
    binding = plan.compare(target.name, target.path, base, head, notes)
    claims = {c.identity: c for c in base.claims} | {c.identity: c for c in head.claims}
    mapping: dict[str, str] = {}
    checks: dict[Identity, list[plan.Check]] = {}
    for change in binding.changes:
        claim = claims[change.identity]
        export = exports[(claim.identity.group, claim.identity.kind)]
        if change.action is plan.Action.DELETE:
            live = _get(target.app, _resource(export, claim), claim.identity)
            checks[change.identity] = [plan.deletion_check(claim.body, live)]
        elif target.control_plane is not None and target.consumer_namespace:
            namespace = mapping.get(claim.identity.namespace) or _mapped(
                target.control_plane, target.consumer_namespace, claim.identity.namespace
            )
            mapping[claim.identity.namespace] = namespace
            checks[change.identity] = [
                _dry_run(target.control_plane, _resource(export, claim), claim, namespace)
            ]
    return plan.with_checks(binding, checks)


def _resource(export: Export, claim: Claim) -> Resource:
    return Resource(export.group, claim.api_version.rpartition("/")[2], export.plural, export.kind)


def _dry_run(cp: Kube, resource: Resource, claim: Claim, namespace: str) -> plan.Check:
    """The reconciler's Control Plane apply of ``claim``, with ``dryRun=All``."""
    body = objects.control_plane_object(claim, namespace)
    try:
        cp.apply(resource, body, force=True, dry_run=True)
    except KubeError as error:
        if error.not_found and f'namespaces "{namespace}" not found' in error.message:
            return plan.Check(
                "dry-run",
                plan.Outcome.SKIPPED,
                f"the Control Plane namespace {namespace} does not exist yet; the reconciler "
                "maps the App namespace on its first sync",
            )
        return plan.Check(
            "dry-run",
            plan.Outcome.FAILED,
            f"the Control Plane refused it ({error.status} {error.reason}): {error.message}",
        )
    return plan.Check("dry-run", plan.Outcome.PASSED)


def _mapped(cp: Kube, consumer: str, app_namespace: str) -> str:
    """The Control Plane namespace an App namespace maps to (reported, else the rule's)."""
    mapping = _get(cp, API_SERVICE_NAMESPACES, Identity("", "", consumer, app_namespace))
    reported = ((mapping or {}).get("status") or {}).get("namespace")
    return reported or mapped_namespace(consumer, app_namespace)


def _get(kube: Kube | None, resource: Resource, identity: Identity) -> dict[str, Any] | None:
    if kube is None:
        return None
    try:
        return kube.get(resource, identity.namespace, identity.name)
    except KubeError as error:
        raise KlutchError(
            f"cannot read {resource.kind or resource.plural} {identity.namespace}/"
            f"{identity.name}: {error}",
            "check that the kubeconfig may read it",
        ) from None


def _exports(cp: Kube, consumer: str) -> dict[tuple[str, str], Export]:
    try:
        items, _ = cp.list(API_SERVICE_EXPORTS, consumer)
    except KubeError as error:
        raise KlutchError(
            f"cannot list the APIServiceExports of {consumer} on the Control Plane: {error}",
            "pass the binding's kubeconfig and its consumer namespace",
        ) from None
    return {(e.group, e.kind): e for e in map(Export.of, items)}


def catalog_exports() -> dict[tuple[str, str], Export]:
    """The claim kinds of the catalog's XRDs, with the schemas of the CRDs Crossplane makes."""
    exports = {}
    for xrd in load_xrds():
        spec, claim_names = xrd["spec"], xrd["spec"]["claimNames"]
        schemas = {}
        for version in spec.get("versions") or []:
            if not version.get("served", True):
                continue
            schema = (version.get("schema") or {}).get("openAPIV3Schema") or {}
            properties = dict(schema.get("properties") or {})
            claim_spec = dict(properties.get("spec") or {"type": "object"})
            claim_spec["properties"] = {**(claim_spec.get("properties") or {}), **CLAIM_SPEC_FIELDS}
            schemas[version["name"]] = {**schema, "properties": {**properties, "spec": claim_spec}}
        export = Export(spec["group"], claim_names["kind"], claim_names["plural"], schemas=schemas)
        exports[(export.group, export.kind)] = export
    return exports


# -- bindings from the reconciler's config ----------------------------------------------------


def config_targets(
    config: Config, repo: Path, names: Sequence[str] = (), paths: Sequence[str] = ()
) -> list[Target]:
    """The targets of the reconciler's registrations (its config's and the RepositoryBindings
    on the Control Plane) that follow ``repo``, or are named, narrowed to ``paths``."""
    admin = Kube(api_client(config.control_plane_kubeconfig))
    specs = [*config.repositories, *_repository_bindings(admin)]
    if names:
        unknown = sorted(set(names) - {s.name for s in specs})
        if unknown:
            raise KlutchError(
                f"no repository named {', '.join(unknown)} in the config",
                f"use one of: {', '.join(sorted(s.name for s in specs)) or 'none'}",
            )
        chosen = [s for s in specs if s.name in names]
    else:
        ours = _locations(repo)
        chosen = [s for s in specs if _location(s.url) in ours]
        if not chosen:
            raise KlutchError(
                f"no registered repository follows {repo} (remotes: {', '.join(sorted(ours))})",
                "pass --repository NAME to choose the registration",
            )
    if paths:
        wanted = {_folder(p) for p in paths}
        chosen = [s for s in chosen if _folder(s.path) in wanted]
        if not chosen:
            raise KlutchError(
                f"no chosen registration binds {', '.join(sorted(wanted))}",
                "leave out --path, or pass the path of a registration",
            )
    resolver = Resolver(admin, Path(tempfile.gettempdir()))  # only reads kubeconfigs
    return [
        Target(
            name=spec.name,
            path=spec.path,
            consumer_namespace=spec.consumer_namespace,
            app_namespaces=frozenset(spec.app_namespaces),
            control_plane=_client(resolver, spec, spec.control_plane_kubeconfig, "Control Plane"),
            app=_client(resolver, spec, spec.app_kubeconfig, "App Cluster"),
        )
        for spec in chosen
    ]


def _repository_bindings(admin: Kube) -> list[RegistrationSpec]:
    """The registrations of the RepositoryBindings on the Control Plane; broken ones skipped."""
    try:
        items, _ = admin.list(REPOSITORY_BINDINGS)
    except KubeError:
        return []  # not installed, or not readable: the config's registrations still count
    specs = []
    for item in items:
        try:
            specs.append(from_repository_binding(item))
        except KlutchError:
            continue
    return specs


def _client(resolver: Resolver, spec: RegistrationSpec, ref: SecretRef, what: str) -> Kube:
    """The reconciler's own rule: a tenant's kubeconfig strictly, a platform file as a file."""
    return Kube(
        resolver.kube_client(
            ref, f"repository {spec.name}: {what} kubeconfig", spec.consumer_namespace
        )
    )


def _folder(path: str) -> str:
    return os.path.normpath(path.strip() or ".").strip("/") or "."


def _locations(repo: Path) -> set[str]:
    """Where ``repo`` is: itself, and every remote it fetches from."""
    remotes = LocalRepository(repo).remote_urls()
    found = {_location(url, repo) for url in [str(repo), *remotes]}
    return {key for key in found if key}


def _location(url: str, base: Path = Path("/")) -> str:
    """``normalize_repo_url`` of ``url``, with local paths resolved (relative ones from
    ``base``); "" for what names no repository."""
    if url.startswith("file://"):
        url = urlsplit(url).path
    if "://" not in url and (url.startswith((".", "/")) or ":" not in url):
        url = os.path.realpath(base / url)
    try:
        return normalize_repo_url(url)
    except InvalidRepoURL:
        return ""
