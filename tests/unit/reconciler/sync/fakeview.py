"""An in-memory ``View`` (reconciler/sync/view.py) for the sync stages' unit tests.

Objects live in two dicts, one per cluster, keyed by (kind, namespace, name); every write is
recorded in ``writes`` as (verb, cluster, kind, namespace, name) so a test can say what a stage
did and what it did not. ``refuse`` makes a write fail with the given KubeError.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from klutch_gitops.kube.client import KubeError, Resource
from reconciler.manifests import Claim, Export
from reconciler.sync import objects

Key = tuple[str, str, str]  # (kind, namespace, name)


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return obj["kind"], meta.get("namespace", ""), meta["name"]


class FakeView:
    def __init__(self, exports: list[Export], repository: str = "team-repo") -> None:
        self.exports = {(e.group, e.kind): e for e in exports}
        self.mapping: dict[str, str] = {}
        self.repository = repository
        self.app: dict[Key, dict] = {}
        self.cp: dict[Key, dict] = {}
        self.crds: dict[str, dict] = {}
        self.service_bindings: dict[str, dict] = {}
        self.namespace_mappings: dict[str, dict] = {}  # App namespace -> APIServiceNamespace
        self.synced_secrets: set[str] = set()  # Control Plane namespaces whose cache is filled
        self.watched: list[str] = []
        self.writes: list[tuple[str, str, str, str, str]] = []
        self.events: list[tuple[str, str, str]] = []  # Warnings: (object name, reason, message)
        self.normal_events: list[tuple[str, str, str]] = []  # Normal ones, the same
        self.refuse: dict[tuple[str, str, str], KubeError] = {}  # (verb, cluster, name) -> error

    # -- helpers for tests
    def put_app(self, obj: dict) -> dict:
        self.app[key_of(obj)] = obj
        return obj

    def put_cp(self, obj: dict) -> dict:
        self.cp[key_of(obj)] = obj
        return obj

    def _write(self, verb: str, cluster: str, kind: str, namespace: str, name: str) -> None:
        error = self.refuse.pop((verb, cluster, name), None)
        if error is not None:
            raise error
        self.writes.append((verb, cluster, kind, namespace, name))

    def _apply(self, store: dict[Key, dict], cluster: str, body: dict, verb: str = "apply") -> dict:
        key = key_of(body)
        self._write(verb, cluster, *key)
        merged = copy.deepcopy(store.get(key) or {})
        for field, value in body.items():
            merged[field] = {**merged.get(field, {}), **value} if field == "metadata" else value
        merged["metadata"].setdefault("uid", f"uid-{key[2]}")
        store[key] = merged
        return copy.deepcopy(merged)

    # -- the View
    def export_of(self, claim: Claim) -> Export:
        return self.exports[(claim.identity.group, claim.identity.kind)]

    def watch_service_bindings(self) -> None:
        self.watched.append("apiservicebindings")

    def app_crd(self, name: str) -> dict | None:
        return self.crds.get(name)

    def serve_crd(self, crd: dict) -> None:
        self._write("apply", "app", "CustomResourceDefinition", "", crd["metadata"]["name"])
        self.crds[crd["metadata"]["name"]] = crd

    def service_binding(self, name: str) -> dict | None:
        return self.service_bindings.get(name)

    def app_secret(self, namespace: str, name: str) -> dict | None:
        return self.app.get(("Secret", namespace, name))

    def watch_kind(self, export: Export) -> None:
        self.watched.append(export.name)

    def app_claims(self, export: Export) -> list[dict]:
        return [o for (kind, _, _), o in self.app.items() if kind == export.kind]

    def app_claim(self, export: Export, namespace: str, name: str) -> dict | None:
        return self.app.get((export.kind, namespace, name))

    def get_app(self, resource: Resource, namespace: str, name: str) -> dict | None:
        return self.app.get((resource.kind, namespace, name))

    def apply_app(
        self, resource: Resource, body: dict, *, force: bool = False, status: bool = False
    ) -> dict:
        return self._apply(self.app, "app", body, "apply-status" if status else "apply")

    def patch_app(self, resource: Resource, namespace: str, name: str, patch: dict) -> None:
        self._write("patch", "app", resource.kind, namespace, name)
        live = self.app.get((resource.kind, namespace, name))
        if live is not None:
            live["metadata"].update(patch["metadata"])

    def delete_app(self, resource: Resource, namespace: str, name: str) -> None:
        self._write("delete", "app", resource.kind, namespace, name)
        self.app.pop((resource.kind, namespace, name), None)

    def secret_copies(self) -> list[dict]:
        return [
            o
            for (kind, _, _), o in self.app.items()
            if kind == "Secret" and objects.repository_of(o) == self.repository
        ]

    def secret_copy(self, namespace: str, name: str) -> dict | None:
        return self.app.get(("Secret", namespace, name))

    def event(
        self,
        resource: Resource,
        obj: Mapping[str, Any],
        reason: str,
        msg: str,
        type_: str = "Warning",
    ) -> None:
        told = self.events if type_ == "Warning" else self.normal_events
        told.append((obj["metadata"]["name"], reason, msg))

    def namespace_mapping(self, namespace: str) -> dict | None:
        return self.namespace_mappings.get(namespace)

    def request_namespace_mapping(self, namespace: str) -> None:
        self._write("apply", "cp", "APIServiceNamespace", "consumer", namespace)
        self.namespace_mappings[namespace] = {"metadata": {"name": namespace}}

    def map_namespace(self, namespace: str, target: str) -> None:
        self.mapping[namespace] = target

    def watch_mapped_claims(self) -> None:
        self.watched.append("mapped claims")

    def cp_claim(self, export: Export, target: str, name: str) -> dict | None:
        return self.cp.get((export.kind, target, name))

    def get_cp(self, resource: Resource, namespace: str, name: str) -> dict | None:
        return self.cp.get((resource.kind, namespace, name))

    def apply_cp(self, resource: Resource, body: dict) -> None:
        self._apply(self.cp, "cp", body)

    def delete_cp(self, resource: Resource, namespace: str, name: str) -> bool:
        self._write("delete", "cp", resource.kind, namespace, name)
        return self.cp.pop((resource.kind, namespace, name), None) is not None

    def cp_secrets_synced(self, target: str) -> bool:
        return target in self.synced_secrets

    def cp_secret(self, target: str, name: str) -> dict | None:
        return self.cp.get(("Secret", target, name))
