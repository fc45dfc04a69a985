"""The platform repository: APIServiceExportTemplates and the catalog, applied to the Control Plane.

Only the kinds a platform team publishes are accepted; each applied object carries a label so that
what leaves Git is pruned, and nothing else on the Control Plane is ever touched.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from klutch_gitops.apis import COMPOSITIONS, TEMPLATES, XRDS
from klutch_gitops.config import PlatformSpec
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.urls import normalize_repo_url
from klutch_gitops.yamlsafe import YamlError, load_documents
from reconciler.git.checkout import Checkout
from reconciler.git.credentials import Credentials
from reconciler.manifests import Identity, Rejection
from reconciler.sync.desired import Limits

log = logging.getLogger(__name__)

# The label's value names the source (repository, branch, path), so two platform repositories on
# one Control Plane never prune each other's objects.
PLATFORM_LABEL = "gitops.klutch.anynines.com/platform"
TEMPLATE_NAMESPACE = "crossplane-system"
KINDS = {(r.group, r.kind): r for r in (*TEMPLATES, XRDS, COMPOSITIONS)}


@dataclass
class PlatformResult:
    applied: int
    pruned: int
    rejections: list[Rejection]


@dataclass(frozen=True)
class PlatformObject:
    resource: Resource
    body: dict[str, Any]
    file: str
    document: int


def source_id(spec: PlatformSpec) -> str:
    """A label value for one platform source: stable, short, and free of URL characters."""
    key = f"{normalize_repo_url(spec.url)}#{spec.branch}#{spec.path.strip('/') or '.'}"
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def platform_objects(
    root: Path, path: str, label: str
) -> tuple[list[PlatformObject], list[Rejection]]:
    """Accepted platform documents under ``path``, and why the others were refused."""
    accepted: list[PlatformObject] = []
    rejections: list[Rejection] = []
    base = (root / path).resolve()
    for file in sorted(
        p
        for p in base.rglob("*")
        if p.suffix in (".yaml", ".yml") and ".klutch" not in p.parts and ".git" not in p.parts
    ):
        relative = file.relative_to(root).as_posix()
        try:
            documents = load_documents(file.read_text(), Limits())
        except (YamlError, UnicodeDecodeError, OSError) as error:
            rejections.append(
                Rejection(file=relative, message=str(error), fix="fix the file so it parses")
            )
            continue
        for document in documents:
            obj = document.value
            if obj is None:
                continue
            identity = Identity.of(obj) if isinstance(obj, dict) else None
            resource = KINDS.get((identity.group, identity.kind)) if identity else None
            if resource is None:
                rejections.append(
                    Rejection(
                        file=relative,
                        document=document.index,
                        field="kind",
                        message="not a platform kind",
                        fix="the platform repository holds "
                        "APIServiceExportTemplates, CompositeResourceDefinitions and Compositions",
                    )
                )
                continue
            body = dict(obj)
            meta = dict(body.get("metadata") or {})
            if resource.namespaced:
                meta.setdefault("namespace", TEMPLATE_NAMESPACE)
            meta["labels"] = {**(meta.get("labels") or {}), PLATFORM_LABEL: label}
            body["metadata"] = meta
            accepted.append(PlatformObject(resource, body, relative, document.index))
    return accepted, rejections


class PlatformSync:
    def __init__(
        self, spec: PlatformSpec, admin: Kube, directory: Path, credentials: Credentials | None
    ) -> None:
        self.spec = spec
        self.admin = admin
        self.checkout = Checkout.open_or_clone(spec.url, spec.branch, directory, credentials)
        self.label = source_id(spec)
        self.needs_fetch = True

    def sync(self) -> PlatformResult:
        """Apply and prune; refused documents are reported, API failures raise for a retry."""
        if self.needs_fetch or self.checkout.head is None:
            self.needs_fetch = False
            self.checkout.fetch()
        accepted, rejections = platform_objects(self.checkout.root, self.spec.path, self.label)
        failures: list[str] = []
        wanted: set[tuple[str, str, str, str]] = set()
        for item in accepted:
            meta = item.body["metadata"]
            wanted.add(
                (item.resource.plural, item.resource.group, meta.get("namespace", ""), meta["name"])
            )
            try:
                self.admin.apply(item.resource, item.body)
            except KubeError as error:
                if error.status in (400, 403, 409, 422):  # the document's problem, not ours
                    rejections.append(
                        Rejection(
                            file=item.file,
                            document=item.document,
                            identity=Identity.of(item.body),
                            message=f"Control Plane refused it: {error.message}",
                            fix="fix the document; a conflict means another tool owns a field",
                        )
                    )
                else:
                    failures.append(f"{item.file}: {error}")
        pruned = 0 if failures else self._prune(wanted)
        for rejection in rejections:
            log.warning(
                "platform document refused: %s",
                rejection.message,
                extra={
                    "file": rejection.file,
                    "document": rejection.document,
                    "fix": rejection.fix,
                },
            )
        if failures:
            raise KlutchError(
                f"platform repository: {len(failures)} object(s) not applied: "
                + "; ".join(failures),
                "retrying with back-off",
            )
        return PlatformResult(len(accepted), pruned, rejections)

    def _prune(self, wanted: set[tuple[str, str, str, str]]) -> int:
        pruned = 0
        for resource in KINDS.values():
            try:
                items, _ = self.admin.list(
                    resource, label_selector=f"{PLATFORM_LABEL}={self.label}"
                )
            except KubeError as error:
                if error.not_found:
                    continue  # the API is not installed: nothing of ours can exist
                raise
            for item in items:
                meta = item["metadata"]
                key = (resource.plural, resource.group, meta.get("namespace", ""), meta["name"])
                if key not in wanted:
                    self.admin.delete(resource, meta.get("namespace"), meta["name"])
                    pruned += 1
        return pruned
