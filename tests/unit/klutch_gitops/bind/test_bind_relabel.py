"""The consumer label of earlier binds: which App Cluster objects get today's key, and that the
migration asks once, is idempotent, and never fails a bind."""

from __future__ import annotations

from typing import Any

import pytest

from klutch_gitops.apis import API_SERVICE_BINDINGS, CONSUMER_LABEL
from klutch_gitops.bind.relabel import OLD_CONSUMER_LABEL, label_patch, relabel
from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.resources import SECRETS


def labelled(**labels: str) -> dict[str, Any]:
    return {"metadata": {"name": "x", "labels": labels}}


OLD = {OLD_CONSUMER_LABEL: "team-a-x"}


def test_an_object_with_only_the_old_label_gets_the_new_one_with_its_value() -> None:
    assert label_patch(labelled(**OLD)) == {"metadata": {"labels": {CONSUMER_LABEL: "team-a-x"}}}


@pytest.mark.parametrize(
    "obj",
    [
        labelled(),
        {"metadata": {"name": "x"}},
        labelled(**{CONSUMER_LABEL: "team-a-x"}),
        labelled(**OLD, **{CONSUMER_LABEL: "team-a-y"}),  # today's key wins, untouched
    ],
)
def test_an_object_without_the_old_label_or_with_the_new_one_is_left_alone(
    obj: dict[str, Any],
) -> None:
    assert label_patch(obj) is None


def test_the_two_keys_differ() -> None:
    assert OLD_CONSUMER_LABEL != CONSUMER_LABEL


class FakeKube:
    """Objects by resource; list honours a bare-key label selector, patch merges labels."""

    def __init__(self, objects: dict[Resource, list[dict[str, Any]]], refuse: bool = False):
        self.objects = objects
        self.refuse = refuse
        self.patches: list[tuple[str, str | None, str]] = []

    def list(
        self, resource: Resource, namespace: str | None = None, label_selector: str | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        if self.refuse:
            raise KubeError(403, "Forbidden", "no")
        items = [
            obj
            for obj in self.objects.get(resource, [])
            if namespace in (None, obj["metadata"].get("namespace"))
            and (label_selector is None or label_selector in obj["metadata"].get("labels", {}))
        ]
        return items, "1"

    def patch(
        self, resource: Resource, namespace: str | None, name: str, patch: dict[str, Any]
    ) -> dict[str, Any]:
        self.patches.append((resource.kind, namespace, name))
        for obj in self.objects[resource]:
            if obj["metadata"]["name"] == name:
                obj["metadata"]["labels"].update(patch["metadata"]["labels"])
        return {}


def test_old_labelled_secrets_and_bindings_are_relabelled_once() -> None:
    secret = {"metadata": {"name": "a-kubeconfig", "namespace": "klutch-bind", "labels": {**OLD}}}
    elsewhere = {"metadata": {"name": "b", "namespace": "default", "labels": {**OLD}}}
    binding = {"metadata": {"name": "postgresqlinstances.anynines.com", "labels": {**OLD}}}
    current = {"metadata": {"name": "backups.anynines.com", "labels": {CONSUMER_LABEL: "c"}}}
    kube = FakeKube({SECRETS: [secret, elsewhere], API_SERVICE_BINDINGS: [binding, current]})
    assert relabel(kube) == [  # type: ignore[arg-type]
        "Secret/a-kubeconfig",
        "APIServiceBinding/postgresqlinstances.anynines.com",
    ]
    assert secret["metadata"]["labels"] == {**OLD, CONSUMER_LABEL: "team-a-x"}
    assert elsewhere["metadata"]["labels"] == OLD  # only klutch-bind's Secrets
    assert relabel(kube) == []  # type: ignore[arg-type]
    assert len(kube.patches) == 2


def test_a_caller_who_may_not_list_binds_anyway() -> None:
    assert relabel(FakeKube({}, refuse=True)) == []  # type: ignore[arg-type]
