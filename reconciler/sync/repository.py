"""Everything the reconciler does for one registered repository.

One ``sync`` pass runs the stages in order — fetch, desired state, App Cluster, Control Plane,
prune and finalize, status and credentials back — and schedules a write-back when what it observed
changed. Passes are cheap when nothing changed: cluster state comes from informer caches and only
differences are written. Informer events and source triggers enqueue passes; the work queue
serialises them per repository.

With ``appSync: external`` Argo CD or Flux applies the claims to the App Cluster. A pass then
adopts the App objects that Git names (our label and finalizer, nothing else), mirrors what the
tool applied — not Git's newest commit, which the tool may not have synced yet — to the Control
Plane, and never applies spec to or prunes in the App Cluster. Deletion starts when the tool
deletes the App object: our finalizer holds it until the Control Plane copy is gone.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from klutch_gitops.apis import API_SERVICE_EXPORTS, API_SERVICE_NAMESPACES
from klutch_gitops.bind.client import SERVICE_BINDINGS
from klutch_gitops.config import Bot
from klutch_gitops.failpoints import failpoint
from klutch_gitops.git.checkout import Checkout
from klutch_gitops.kube.client import CRDS, EVENTS, SECRETS, KubeError, Resource
from klutch_gitops.kube.informer import Informer
from klutch_gitops.manifests import Claim, Export, Identity, Location, Rejection
from reconciler import metrics
from reconciler.sync import konnector, objects
from reconciler.sync.binding import Binding
from reconciler.sync.desired import DesiredState, load_desired
from reconciler.sync.outcome import PassOutcome
from reconciler.sync.writeback import (
    Mode,
    ObservedStatus,
    Summary,
    render_changes,
    source_commit,
    write_back,
)

log = logging.getLogger(__name__)

Key = tuple[str, str]  # ("sync" | "writeback", repository name)
APPLY_CONCURRENCY = 8  # writes in flight per pass; the client's connection pool holds 10
# While a foreign konnector conflict stands, look again this often: its kubeconfig Secret may be
# pointed at our consumer namespace without any event the reconciler watches.
KONNECTOR_RECHECK_SECONDS = 30.0


SERVICE_BINDINGS_CRD = f"{SERVICE_BINDINGS.plural}.{SERVICE_BINDINGS.group}"


def resource_of(export: Export, version: str | None = None) -> Resource:
    return Resource(
        export.group, version or next(iter(export.schemas), "v1"), export.plural, export.kind
    )


class RepositorySync:
    def __init__(
        self,
        binding: Binding,
        work_dir: Path,
        bot: Bot,
        batch_window: float,
        enqueue: Callable[[Key], None],
        enqueue_after: Callable[[Key, float], None],
    ) -> None:
        self.binding = binding
        self.spec = binding.spec
        self.name = binding.spec.name
        self.bot = binding.spec.write_back.author or bot
        self.batch_window = batch_window
        self._enqueue = enqueue
        self._enqueue_after = enqueue_after
        mode = Mode(self.spec.write_back.mode)
        self.mode = mode
        self.external = self.spec.app_sync == "external"
        self.reader = Checkout.open_or_clone(
            self.spec.url, self.spec.branch, work_dir / self.name / "source", binding.credentials
        )
        self.writer = Checkout.open_or_clone(
            self.spec.url,
            self.spec.write_back.branch if mode is Mode.BRANCH else self.spec.branch,
            work_dir / self.name / "write-back",
            binding.credentials,
        )
        self.needs_fetch = True
        self.head: str | None = None
        self.exports: dict[tuple[str, str], Export] = {}
        self.mapping: dict[str, str] = {}  # App namespace -> Control Plane namespace
        self.app_claims: dict[str, Informer] = {}  # plural.group -> informer
        self.cp_claims: dict[tuple[str, str], Informer] = {}  # (plural.group, cp ns)
        self.cp_secrets: dict[str, Informer] = {}
        self.app_secrets = Informer(
            binding.app,
            SECRETS,
            self._on_event,
            label_selector=f"{objects.REPOSITORY_LABEL}={self.name}",
            name=f"{self.name}-app-secrets",
        ).start()
        self._desired: tuple[tuple, DesiredState] | None = None
        self._report: tuple[tuple[ObservedStatus, ...], Summary] | None = None
        self._scheduled_fingerprint = ""
        self.last_status_commit: str | None = None
        self.last_pass: PassOutcome | None = None  # None until a pass completes
        self.pending = True
        self._held: set[Identity] = set()  # deletion-protected App objects being deleted
        self.konnectors: dict[str, konnector.Verdict] = {}  # export name -> Klutch's konnector
        self._konnector_logged: dict[str, str] = {}  # export name -> what was last logged
        self.service_bindings: Informer | None = None  # a trigger: APIServiceBinding changes
        self._service_bindings_forbidden = False
        self._source: tuple[str | None, str] = (None, "")
        self._lock = threading.Lock()

    # -- triggers ---------------------------------------------------------------------------

    def trigger_fetch(self) -> None:
        self.needs_fetch = True
        self._enqueue(("sync", self.name))

    def _on_event(self, _event: str, _obj: dict) -> None:
        self._enqueue(("sync", self.name))

    def _on_app_event(self, _event: str, obj: dict) -> None:
        """In external mode the App informer sees every claim of its kind: only ours count."""
        if obj["metadata"].get("namespace") in self.spec.app_namespaces:
            self._enqueue(("sync", self.name))

    def _on_service_binding(self, _event: str, obj: dict) -> None:
        """A konnector binding for one of our kinds came, changed or went: decide again."""
        if obj["metadata"].get("name") in {e.name for e in list(self.exports.values())}:
            self._enqueue(("sync", self.name))

    def stop(self) -> None:
        for informer in [
            *self.app_claims.values(),
            *self.cp_claims.values(),
            *self.cp_secrets.values(),
            self.app_secrets,
            *([self.service_bindings] if self.service_bindings else []),
        ]:
            informer.stop()

    # -- the pass ---------------------------------------------------------------------------

    def sync(self) -> None:
        with self._lock:
            if self.needs_fetch or self.head is None:
                self.needs_fetch = False
                with metrics.FETCH_SECONDS.labels(self.name).time():
                    self.head = self.reader.fetch()
            if self.head is None:
                log.info("branch does not exist yet", extra={"repository": self.name})
                return
            raw_exports = self._exports()
            problems: list[Rejection] = []
            self._app_crds(raw_exports, problems)
            desired = self._load_desired(raw_exports)
            pending = self._map_namespaces()
            mirrored = self._adopted(desired, problems) if self.external else desired.claims
            mirrored = self._refuse_foreign_konnector(desired, mirrored, problems)
            self._apply(mirrored, problems)
            if not self.external:
                self._prune(desired, problems)
            self._finalize(problems)
            statuses = self._observe(desired, mirrored)
            self._schedule_write_back(desired, statuses, problems)
            self.last_pass = PassOutcome(self.head, len(mirrored), tuple(problems))
            self.pending = pending
            if pending:
                self._enqueue_after(("sync", self.name), 0.5)
            elif self.conflicts:
                self._enqueue_after(("sync", self.name), KONNECTOR_RECHECK_SECONDS)

    def settled(self) -> bool:
        """Every namespace mapped and every cache filled: a pass sees the whole picture."""
        informers = [
            *self.app_claims.values(),
            *self.cp_claims.values(),
            *self.cp_secrets.values(),
            self.app_secrets,
        ]
        return not self.pending and all(i.synced.is_set() for i in informers)

    def _exports(self) -> list[dict]:
        items, _ = self.binding.control_plane.list(
            API_SERVICE_EXPORTS, self.spec.consumer_namespace
        )
        self.exports = {(e.group, e.kind): e for e in map(Export.of, items)}
        return items

    def _app_crds(self, raw_exports: list[dict], problems: list[Rejection]) -> None:
        """Serve every exported kind in the App Cluster, without taking over a foreign CRD."""
        for raw in raw_exports:
            service_binding = self._service_binding(raw["metadata"]["name"])
            self.konnectors[raw["metadata"]["name"]] = self._konnector(service_binding)
            crd = objects.crd_from_export(raw, service_binding)
            name = crd["metadata"]["name"]
            live = self.binding.app.get(CRDS, None, name)
            if not objects.owns_crd(live, service_binding):
                problems.append(
                    Rejection(
                        file=self.spec.path,
                        message=(
                            f"CustomResourceDefinition {name} in the App Cluster is not managed by "
                            "klutch-gitops; it is left as it is"
                        ),
                        fix="delete that CRD, or use the APIs it serves without klutch-gitops",
                    )
                )
            elif objects.needs_apply(crd, live):
                self.binding.app.apply(CRDS, crd, force=True)
                self._wait_established(name)
            export = Export.of(raw)
            if export.name not in self.app_claims:
                # external: the tool's new objects carry no label of ours until adopted
                self.app_claims[export.name] = Informer(
                    self.binding.app,
                    resource_of(export),
                    self._on_app_event if self.external else self._on_event,
                    label_selector=None
                    if self.external
                    else f"{objects.REPOSITORY_LABEL}={self.name}",
                    name=f"{self.name}-app-{export.plural}",
                ).start()
        self._konnector_log({Export.of(raw).name for raw in raw_exports})
        if (
            raw_exports
            and self.service_bindings is None
            and not self._service_bindings_forbidden
            and self.binding.app.get(CRDS, None, SERVICE_BINDINGS_CRD) is not None
        ):  # without Klutch's CRD there is nothing to watch, and a watch would only fail
            self.service_bindings = Informer(
                self.binding.app,
                SERVICE_BINDINGS,
                self._on_service_binding,
                name=f"{self.name}-app-apiservicebindings",
            ).start()

    def _service_binding(self, name: str) -> dict | None:
        """The App Cluster's APIServiceBinding named after an export (as ``kubectl bind`` and
        the konnector name it), or None where there is none or we may not read it."""
        try:
            return self.binding.app.get(SERVICE_BINDINGS, None, name)
        except KubeError as error:
            if error.status == 403:
                self._service_bindings_forbidden = True
                return None
            raise

    # -- Klutch's konnector for another consumer namespace ----------------------------------

    @property
    def conflicts(self) -> dict[str, konnector.Verdict]:
        """The exported kinds a konnector serves for another consumer namespace."""
        return {name: v for name, v in self.konnectors.items() if v.conflict}

    def _konnector(self, service_binding: dict | None) -> konnector.Verdict:
        """Which consumer namespace the konnector behind ``service_binding`` writes for."""
        if service_binding is None:
            return konnector.decide(None, None, self.spec.consumer_namespace)
        consumer, why = self._konnector_consumer(service_binding)
        verdict = konnector.decide(service_binding, consumer, self.spec.consumer_namespace)
        return konnector.Verdict(verdict.state, verdict.message or why, verdict.fix)

    def _konnector_consumer(self, service_binding: dict) -> tuple[str | None, str]:
        """The consumer namespace the binding's kubeconfig Secret names, or None and why not.
        The Secret's content stays in this function: it holds the binder's token."""
        name = service_binding["metadata"]["name"]
        ref = konnector.secret_ref(service_binding)
        if ref is None:
            return None, f"APIServiceBinding {name} names no kubeconfigSecretRef"
        try:
            secret = self.binding.app.get(SECRETS, ref.namespace, ref.name)
        except KubeError as error:
            if error.status != 403:
                raise
            return None, f"the App Cluster credentials may not read Secret {ref}"
        if secret is None:
            return None, f"Secret {ref} does not exist"
        encoded = (secret.get("data") or {}).get(ref.key)
        try:
            consumer = konnector.context_namespace(base64.b64decode(encoded or "", validate=True))
        except binascii.Error:
            consumer = None
        if consumer is None:
            return None, f"key {ref.key!r} of Secret {ref} names no current-context namespace"
        return consumer, ""

    def _konnector_log(self, exported: set[str]) -> None:
        """Say once per change what was found: a conflict, or that we cannot tell."""
        for name in set(self.konnectors) - exported:
            self.konnectors.pop(name)
            self._konnector_logged.pop(name, None)
        for name, verdict in self.konnectors.items():
            said = f"{verdict.state.value}: {verdict.message}"
            if self._konnector_logged.get(name) == said:
                continue
            self._konnector_logged[name] = said
            extra = {"repository": self.name, "export": name, "reason": verdict.message}
            if verdict.conflict:
                log.warning("konnector conflict", extra={**extra, "fix": verdict.fix})
            elif verdict.state is konnector.State.UNKNOWN:
                log.info(
                    "an APIServiceBinding exists, but the consumer namespace of its konnector "
                    "cannot be told; syncing as usual",
                    extra=extra,
                )

    def _refuse_foreign_konnector(
        self, desired: DesiredState, claims: tuple[Claim, ...], problems: list[Rejection]
    ) -> tuple[Claim, ...]:
        """Leave out the claims of a kind a konnector serves for another consumer namespace,
        and report each of its documents as refused with the reason and the fix."""
        conflicts = self.conflicts
        if not conflicts:
            return claims
        for claim in desired.claims:
            verdict = conflicts.get(self._export(claim).name)
            if verdict is not None:
                problems.append(
                    Rejection(
                        file=claim.location.file,
                        document=claim.location.document,
                        identity=claim.identity,
                        message=f"{claim.identity} is not synced: {verdict.message}",
                        fix=verdict.fix,
                    )
                )
        return tuple(c for c in claims if self._export(c).name not in conflicts)

    def _wait_established(self, name: str, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            crd = self.binding.app.get(CRDS, None, name) or {}
            conditions = (crd.get("status") or {}).get("conditions") or []
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                return
            time.sleep(0.1)

    def _load_desired(self, raw_exports: list[dict]) -> DesiredState:
        key = (self.head, tuple(sorted(e["metadata"]["resourceVersion"] for e in raw_exports)))
        if self._desired is None or self._desired[0] != key:
            self._desired = (
                key,
                load_desired(
                    self.reader.root,
                    self.spec.path,
                    self.exports,
                    frozenset(self.spec.app_namespaces),
                ),
            )
        return self._desired[1]

    def _map_namespaces(self) -> bool:
        """Ask for every allowed App namespace's Control Plane namespace; True while pending."""
        pending = False
        cp = self.binding.control_plane
        for namespace in self.spec.app_namespaces:
            if namespace in self.mapping:
                continue
            mapping = cp.get(API_SERVICE_NAMESPACES, self.spec.consumer_namespace, namespace)
            if mapping is None:
                cp.apply(
                    API_SERVICE_NAMESPACES,
                    {
                        "apiVersion": API_SERVICE_NAMESPACES.api_version,
                        "kind": "APIServiceNamespace",
                        "metadata": {"name": namespace, "namespace": self.spec.consumer_namespace},
                        "spec": {},
                    },
                )
            target = ((mapping or {}).get("status") or {}).get("namespace")
            if not target:
                pending = True
                continue
            self.mapping[namespace] = target
            self.cp_secrets[target] = Informer(
                cp,
                SECRETS,
                self._on_event,
                namespace=target,
                name=f"{self.name}-cp-secrets-{target}",
            ).start()
        for export in self.exports.values():
            for target in self.mapping.values():
                if (export.name, target) not in self.cp_claims:
                    self.cp_claims[(export.name, target)] = Informer(
                        cp,
                        resource_of(export),
                        self._on_event,
                        namespace=target,
                        name=f"{self.name}-cp-{export.plural}-{target}",
                    ).start()
        return pending

    def _export(self, claim: Claim) -> Export:
        return self.exports[(claim.identity.group, claim.identity.kind)]

    def _live(self, claim: Claim) -> dict | None:
        informer = self.app_claims.get(self._export(claim).name)
        return informer.get(claim.identity.namespace, claim.identity.name) if informer else None

    def _upstream(self, claim: Claim) -> dict | None:
        target = self.mapping.get(claim.identity.namespace)
        if target is None:
            return None
        return self.cp_claims[(self._export(claim).name, target)].get(target, claim.identity.name)

    def _adopted(self, desired: DesiredState, problems: list[Rejection]) -> tuple[Claim, ...]:
        """External mode: the App objects to mirror, as claims. Ours are those Git names (not
        yet adopted) and those carrying our label (adopted, even if Git dropped them and the
        tool did not prune them: the App Cluster says what is deployed)."""
        in_git = {c.identity: c for c in desired.claims}
        claims = []
        for export in self.exports.values():
            informer = self.app_claims.get(export.name)
            for live in informer.items() if informer else []:
                meta = live["metadata"]
                if meta["namespace"] not in self.spec.app_namespaces or meta.get(
                    "deletionTimestamp"
                ):
                    continue
                identity = Identity.of(live)
                git = in_git.get(identity)
                owner = objects.repository_of(live)
                if owner not in (None, self.name):
                    if git is not None:
                        problems.append(
                            Rejection(
                                file=git.location.file,
                                document=git.location.document,
                                message=f"{identity} in the App Cluster belongs to repository "
                                f"{owner}; it is not mirrored from here",
                                fix="define each claim in one repository only",
                            )
                        )
                    continue
                if owner is None and git is None:
                    continue  # someone else's object: not named by this repository
                claims.append(
                    Claim(
                        identity,
                        live["apiVersion"],
                        objects.mirrored_body(live),
                        git.location if git else Location(self.spec.path, 0),
                        git.git_status if git else None,
                    )
                )
        return tuple(sorted(claims, key=lambda c: c.identity))

    def _apply(self, claims: tuple[Claim, ...], problems: list[Rejection]) -> None:
        """Server-side apply what differs: App without force (conflicts are reported), then the
        Control Plane with force (it is our mirror: drift there is reverted).

        Deciding is cheap and done in order; only the writes run concurrently, so an idle pass
        costs no threads and a cold sync of many claims is not one round-trip at a time.
        """
        writes = [write for claim in claims if (write := self._plan(claim))]
        if len(writes) <= 1:
            found = [self._write(*write) for write in writes]
        else:
            with ThreadPoolExecutor(APPLY_CONCURRENCY, thread_name_prefix="apply") as pool:
                found = list(pool.map(lambda write: self._write(*write), writes))
        problems.extend(p for problem in found for p in problem)

    def _plan(self, claim: Claim) -> tuple[Claim, Resource, dict | None, dict | None] | None:
        """What to write for one claim (App body, Control Plane body), or None if in sync.

        External mode: the App body only adopts (label, finalizer); the spec is the tool's."""
        export = self._export(claim)
        resource = resource_of(export, claim.api_version.rpartition("/")[2])
        ident = claim.identity
        live = self._live(claim)
        if live is not None and live["metadata"].get("deletionTimestamp"):
            return None  # finishing a deletion first; the next pass recreates it
        if self.external:
            app_body = objects.adoption_object(live, self.name) if live is not None else None
        else:
            body = objects.app_object(claim, self.name, self.spec.path, self.head or "", live)
            app_body = body if objects.needs_apply(body, live) else None
        target = self.mapping.get(ident.namespace)
        cp_body = None
        if target is not None:
            copy = objects.control_plane_object(claim, target)
            cp_body = copy if objects.needs_apply(copy, self._upstream(claim)) else None
        if app_body is None and cp_body is None:
            return None
        return claim, resource, app_body, cp_body

    def _write(
        self, claim: Claim, resource: Resource, app_body: dict | None, cp_body: dict | None
    ) -> list[Rejection]:
        if app_body is not None:
            try:
                self._apply_app(resource, app_body)
            except KubeError as error:
                ident = claim.identity
                informer = self.app_claims.get(f"{resource.plural}.{resource.group}")
                live = informer.get(ident.namespace, ident.name) if informer else None
                if live is not None:
                    self._event(resource, live, "ApplyFailed", error.message)
                return [self._problem(claim, error, "App Cluster")]
        if cp_body is not None:
            try:
                self.binding.control_plane.apply(resource, cp_body, force=True)
            except KubeError as error:
                return [self._problem(claim, error, "Control Plane")]
            failpoint("controlplane.after-apply")
        return []

    def _apply_app(self, resource: Resource, body: dict) -> None:
        """Server-side apply of an App claim. On a field conflict, once, the fields kubectl set
        are taken over as Flux does (``objects.without_kubectl_managers``) and the apply is
        repeated: a claim made with kubectl moves into Git. Another tool's fields stay a conflict.
        """
        app = self.binding.app
        try:
            app.apply(resource, body)
        except KubeError as error:
            if not error.conflict or self.external:
                raise
            meta = body["metadata"]
            live = app.get(resource, meta["namespace"], meta["name"]) or {"metadata": {}}
            kept = objects.without_kubectl_managers(live["metadata"].get("managedFields") or [])
            if kept is None:
                raise
            version = live["metadata"]["resourceVersion"]  # a concurrent writer makes it a 409
            app.patch(
                resource,
                meta["namespace"],
                meta["name"],
                {"metadata": {"managedFields": kept, "resourceVersion": version}},
            )
            app.apply(resource, body)

    def _problem(self, claim: Claim, error: KubeError, where: str) -> Rejection:
        fix = {
            409: "another field manager owns these fields: remove them from Git or from "
            "the other tool",
            422: "change the claim so the Control Plane accepts it",
            403: "the binding may not do this: check the exported APIs and namespaces",
        }
        return Rejection(
            file=claim.location.file,
            document=claim.location.document,
            message=f"{where} refused {claim.identity}: {error.message}",
            fix=fix.get(error.status, "see the message; the next sync retries"),
        )

    def _prune(self, desired: DesiredState, problems: list[Rejection]) -> None:
        """Delete what left Git — but never what a rejected document still names: a typo in a
        live claim, or a file that stopped parsing, must not delete a running data service."""
        keep = {c.identity for c in desired.claims} | {
            r.identity for r in desired.rejections if r.identity
        }
        # a rejection that cannot name its object (the file did not parse, ...) holds the file
        held_files = [r.file for r in desired.rejections if r.identity is None]
        for export in self.exports.values():
            if export.name in self.conflicts:
                continue  # a konnector writes this kind for another consumer: hands off
            informer = self.app_claims.get(export.name)
            for live in objects.to_prune(informer.items() if informer else [], keep):
                meta = live["metadata"]
                source = (meta.get("annotations") or {}).get(objects.FILE_ANNOTATION, "")
                if any(objects.within(source, held) for held in held_files):
                    continue
                if objects.deletion_protected(live):
                    message = (
                        f"{Identity.of(live)} left Git but is deletion-protected; it was "
                        "not deleted"
                    )
                    problems.append(
                        Rejection(
                            file=meta.get("annotations", {}).get(objects.FILE_ANNOTATION, ""),
                            message=message,
                            fix=f"remove the {objects.DELETION_PROTECTION} "
                            "annotation from the live object to delete it",
                        )
                    )
                    self._event(resource_of(export), live, "DeletionRefused", message)
                    continue
                self.binding.app.delete(resource_of(export), meta["namespace"], meta["name"])

    def _finalize(self, problems: list[Rejection]) -> None:
        """Release an App claim only when its Control Plane copy is really gone, and never a
        deletion-protected one: its copy (the running service) stays until the annotation goes.
        """
        held: set[Identity] = set()
        for export in self.exports.values():
            if export.name in self.conflicts:
                continue  # deletes nothing on the Control Plane while the conflict stands
            informer = self.app_claims.get(export.name)
            for live in informer.items() if informer else []:
                meta = live["metadata"]
                if (
                    not meta.get("deletionTimestamp")
                    or objects.FINALIZER not in (meta.get("finalizers") or [])
                    or objects.repository_of(live) != self.name
                ):
                    continue
                target = self.mapping.get(meta["namespace"])
                if target is None and meta["namespace"] in self.spec.app_namespaces:
                    continue  # mapping not known yet (e.g. just restarted): keep holding
                resource = resource_of(export)
                if objects.deletion_protected(live):
                    held.add(self._hold(resource, live, problems))
                    continue
                if target is not None and (
                    self.binding.control_plane.delete(resource, target, meta["name"])
                    or self.binding.control_plane.get(resource, target, meta["name"])
                ):
                    continue  # the CP informer's DELETED event brings us back
                remaining = [f for f in meta["finalizers"] if f != objects.FINALIZER]
                try:
                    self.binding.app.patch(
                        resource,
                        meta["namespace"],
                        meta["name"],
                        {"metadata": {"finalizers": remaining or None}},
                    )
                except KubeError as error:
                    if not error.not_found:
                        raise
        self._held = held

    def _hold(self, resource: Resource, live: dict, problems: list[Rejection]) -> Identity:
        """Report a deletion-protected App object that is being deleted (an Event only once)."""
        identity = Identity.of(live)
        message = (
            f"{identity} is being deleted but is deletion-protected; its Control Plane copy is "
            "kept and the deletion waits"
        )
        annotations = live["metadata"].get("annotations") or {}
        problems.append(
            Rejection(
                file=annotations.get(objects.FILE_ANNOTATION) or self.spec.path,
                message=message,
                fix=f"remove the {objects.DELETION_PROTECTION} annotation from the live object "
                "to let the deletion finish",
            )
        )
        if identity not in self._held:
            self._event(resource, live, "DeletionRefused", message)
        return identity

    def _observe(
        self, desired: DesiredState, mirrored: tuple[Claim, ...]
    ) -> tuple[ObservedStatus, ...]:
        """Copy status and provider-owned Secrets to the mirrored App objects; return what Git
        gets (the status of every claim Git holds)."""
        statuses = tuple(
            ObservedStatus(
                claim.identity,
                claim.api_version,
                (self._upstream(claim) or {}).get("status"),
                claim.location.file,
                claim.location.document,
            )
            for claim in desired.claims
        )
        for claim in mirrored:
            live, upstream = self._live(claim), self._upstream(claim)
            if live is None or upstream is None:
                continue
            target = self.mapping[claim.identity.namespace]
            in_sync = not objects.needs_apply(objects.control_plane_object(claim, target), upstream)
            patch = objects.status_object(live, upstream, in_sync)
            if patch is not None:
                resource = resource_of(self._export(claim), claim.api_version.rpartition("/")[2])
                self.binding.app.apply(resource, patch, force=True, subresource="status")
            self._copy_secrets(claim, live, target)
        self._drop_orphan_secrets(mirrored)
        return statuses

    def _copy_secrets(self, claim: Claim, live: dict, target: str | None) -> None:
        upstream_cache = self.cp_secrets.get(target or "")
        if upstream_cache is None or not upstream_cache.synced.is_set():
            return  # an unfilled cache would look like deleted credentials
        for name in objects.credential_secret_names(claim.body):
            upstream = upstream_cache.get(target or "", name)
            current = self.app_secrets.get(claim.identity.namespace, name)
            if upstream is None:
                if current is not None:
                    self.binding.app.delete(SECRETS, claim.identity.namespace, name)
                continue
            if objects.claimed_by_konnector(upstream):
                continue  # Klutch's konnector copies it down; a second writer would fight it
            wanted = objects.secret_copy(upstream, claim.identity.namespace, self.name, live)
            if (
                current is None
                or current.get("data") != wanted["data"]
                or objects.needs_apply(wanted, current)
            ):
                self.binding.app.apply(SECRETS, wanted, force=True)

    def _drop_orphan_secrets(self, claims: tuple[Claim, ...]) -> None:
        """Drop a copied Secret its claim no longer names. A Secret whose claim is gone goes
        with it (ownerReference); one whose claim was only rejected stays, like the claim."""
        named = {
            (
                c.identity.namespace,
                c.identity.kind,
                c.identity.name,
            ): objects.credential_secret_names(c.body)
            for c in claims
        }
        for secret in self.app_secrets.items():
            meta = secret["metadata"]
            for owner in meta.get("ownerReferences") or []:
                wanted = named.get((meta["namespace"], owner["kind"], owner["name"]))
                if wanted is not None and meta["name"] not in wanted:
                    self.binding.app.delete(SECRETS, meta["namespace"], meta["name"])

    # -- write-back -------------------------------------------------------------------------

    def _schedule_write_back(
        self, desired: DesiredState, statuses: tuple[ObservedStatus, ...], problems: list[Rejection]
    ) -> None:
        rejections = (*desired.rejections, *problems)
        metrics.CLAIMS.labels(self.name).set(len(desired.claims))
        metrics.REJECTED.labels(self.name).set(len(desired.rejections))
        # The newest human commit, not the head: the head moves with our own status commits,
        # and naming it in reconcile.yaml would make every status commit cause another.
        if self._source[0] != self.head:
            self._source = (self.head, source_commit(self.reader) or self.head or "")
        source = self._source[1]
        summary = Summary(
            source_commit=source,
            rejections=rejections,
            counts={
                "claims": len(desired.claims),
                "rejected": len(desired.rejections),
                "problems": len(problems),
                "ready": sum(1 for s in statuses if _ready(s.status)),
            },
        )
        fingerprint = hashlib.sha256(
            json.dumps(
                [[str(s.identity), s.status] for s in statuses]
                + [r.as_dict() for r in rejections]
                + [summary.counts, summary.source_commit],
                sort_keys=True,
                default=str,
            ).encode()
        ).hexdigest()
        if self.mode is Mode.INLINE:
            # the files hold a status already: only what differs needs their parsing and editing
            in_git = {c.identity: c.git_status for c in desired.claims}
            statuses = tuple(s for s in statuses if s.status != in_git.get(s.identity))
        self._report = (statuses, summary)
        if fingerprint != self._scheduled_fingerprint:
            self._scheduled_fingerprint = fingerprint
            self._enqueue_after(("writeback", self.name), self.batch_window)

    def write_back(self) -> str | None:
        """Commit what the last pass observed; nothing when Git already says it."""
        if self._report is None:
            return None
        statuses, summary = self._report
        self.writer.fetch()
        now = dt.datetime.now(dt.UTC)
        sha = write_back(
            self.writer,
            lambda tree: render_changes(tree, self.spec.path, self.mode, statuses, summary, now),
            message=f"klutch-gitops: status of {summary.counts['claims']} claim(s) in "
            f"{self.spec.path}",
            source_commit=summary.source_commit,
            bot=self.bot,
        )
        if sha:
            self.last_status_commit = sha
            log.info("status committed", extra={"repository": self.name, "commit": sha})
        return sha

    def _event(self, resource: Resource, obj: dict[str, Any], reason: str, message: str) -> None:
        """A Warning Event on the App claim, where `kubectl describe` shows it."""
        try:
            self.binding.app.create(EVENTS, warning_event(resource, obj, reason, message))
        except KubeError as error:
            log.warning("could not record event", extra={"error": str(error)})


def warning_event(
    resource: Resource, obj: Mapping[str, Any], reason: str, message: str
) -> dict[str, Any]:
    """A Warning Event about ``obj``, where `kubectl describe` shows it."""
    meta = obj["metadata"]
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "type": "Warning",
        "reason": reason,
        "message": message[:1024],
        "source": {"component": "klutch-gitops"},
        "metadata": {
            "namespace": meta["namespace"],
            "generateName": f"{meta['name']}.klutch-gitops.",
        },
        "involvedObject": {
            "apiVersion": resource.api_version,
            "kind": resource.kind,
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }


def _ready(status: dict | None) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (status or {}).get("conditions") or []
    )
