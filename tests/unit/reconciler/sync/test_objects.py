"""The sync stages' pure decisions."""

from __future__ import annotations

from typing import Any

from klutch_gitops.kube.informer import managers
from reconciler.manifests import Claim, Identity, Location
from reconciler.sync import app_crds, objects
from reconciler.sync.app_status import AppStatusInputs, app_status

NOW = "2026-01-01T00:00:00Z"


def make_claim(plan: str = "postgresql-single-nano", **meta: object) -> Claim:
    body = {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {"name": "db", "namespace": "team", **meta},
        "spec": {"service": "a9s-postgresql13", "plan": plan},
    }
    return Claim(Identity.of(body), "anynines.com/v1", body, Location("claims/db.yaml", 0, 1))


def test_app_object_records_origin_and_holds_the_finalizer() -> None:
    body = objects.app_object(make_claim(), "team-repo", "claims", "c1", None)
    meta = body["metadata"]
    assert meta["labels"][objects.REPOSITORY_LABEL] == "team-repo"
    assert meta["annotations"][objects.COMMIT_ANNOTATION] == "c1"
    assert meta["annotations"][objects.FILE_ANNOTATION] == "claims/db.yaml"
    assert meta["finalizers"] == [objects.FINALIZER]


def test_commit_annotation_moves_only_when_the_claim_changes() -> None:
    first = objects.app_object(make_claim(), "r", "claims", "c1", None)
    same = objects.app_object(make_claim(), "r", "claims", "c2-status-only", first)
    assert same["metadata"]["annotations"][objects.COMMIT_ANNOTATION] == "c1"
    changed = objects.app_object(
        make_claim(plan="postgresql-single-small"), "r", "claims", "c3", first
    )
    assert changed["metadata"]["annotations"][objects.COMMIT_ANNOTATION] == "c3"


def test_control_plane_copy_drops_foreign_bookkeeping() -> None:
    claim = make_claim(
        labels={"team": "a", "argocd.argoproj.io/instance": "x"},
        annotations={
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "note": "keep",
            "kustomize.toolkit.fluxcd.io/name": "k",
            objects.DELETION_PROTECTION: "true",
        },
    )
    copy = objects.control_plane_object(claim, "cluster-x-team")
    assert copy["metadata"] == {
        "name": "db",
        "namespace": "cluster-x-team",
        "labels": {"team": "a"},
        "annotations": {"note": "keep", objects.BOUND_ANNOTATION: "true"},
    }
    assert copy["spec"] == claim.body["spec"]


def test_needs_apply_ignores_server_defaults_but_sees_changes() -> None:
    desired = {"metadata": {"name": "db"}, "spec": {"plan": "a", "list": [1, 2]}}
    live = {
        "metadata": {"name": "db", "uid": "u"},
        "spec": {"plan": "a", "list": [1, 2], "expose": "Internal"},
    }
    assert not objects.needs_apply(desired, live)
    assert objects.needs_apply(desired, {**live, "spec": {**live["spec"], "plan": "b"}})
    assert objects.needs_apply(desired, {**live, "spec": {**live["spec"], "list": [1]}})
    assert objects.needs_apply(desired, None)
    # the server drops empty maps: asking for none is satisfied by their absence
    assert not objects.needs_apply({**desired, "metadata": {"name": "db", "labels": {}}}, live)
    deleting = {**live, "metadata": {**live["metadata"], "deletionTimestamp": "now"}}
    assert not objects.needs_apply(desired, deleting)


def test_the_status_patch_names_only_the_object() -> None:
    live = {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {"name": "db", "namespace": "team", "uid": "u-1"},
        "status": {"a": 1},
    }
    patch = objects.status_patch(live, {"a": 2})
    assert patch == {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {"name": "db", "namespace": "team"},
        "status": {"a": 2},
    }


def test_credential_secret_names() -> None:
    assert objects.credential_secret_names(make_claim().body) == set()
    binding = {
        "kind": "ServiceBinding",
        "metadata": {"name": "b"},
        "spec": {"writeConnectionSecretToRef": {"name": "conn"}},
    }
    assert objects.credential_secret_names(binding) == {"b-creds", "conn"}


def test_secret_copy_is_owned_by_the_claim_and_marked_provider_owned() -> None:
    upstream = {
        "metadata": {"name": "db-conn", "namespace": "cp"},
        "type": "Opaque",
        "data": {"password": "cA=="},
    }
    owner = {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {"name": "db", "uid": "u-1"},
    }
    copy = objects.secret_copy(upstream, "team", "repo", owner)
    assert copy["metadata"]["namespace"] == "team"
    assert copy["metadata"]["annotations"] == {objects.RESOURCE_OWNER: "Provider"}
    assert copy["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert copy["data"] == {"password": "cA=="}


def test_prune_skips_desired_and_deleting_objects() -> None:
    keep = make_claim().body
    gone = {**keep, "metadata": {**keep["metadata"], "name": "old"}}
    deleting = {**keep, "metadata": {**keep["metadata"], "name": "going", "deletionTimestamp": "t"}}
    assert objects.to_prune([keep, gone, deleting], {Identity.of(keep)}) == [gone]


def test_never_take_over_a_foreign_crd() -> None:
    assert app_crds.owns_crd(None)
    assert app_crds.owns_crd(
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": "klutch-gitops"}}}
    )
    assert not app_crds.owns_crd({"metadata": {"labels": {"app.kubernetes.io/managed-by": "helm"}}})
    assert not app_crds.owns_crd({"metadata": {}})


def tool_applied(**meta: object) -> dict:
    """A claim as Argo CD or Flux leaves it in the App Cluster, with the server's fields."""
    return {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {
            "name": "db",
            "namespace": "team",
            "uid": "u-1",
            "resourceVersion": "7",
            "generation": 2,
            "creationTimestamp": "2026-11-21T10:00:00Z",
            "finalizers": [objects.FINALIZER],
            **meta,
        },
        "spec": {"service": "a9s-postgresql13", "plan": "postgresql-single-nano"},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def test_mirrored_body_strips_argocd_bookkeeping() -> None:
    live = tool_applied(
        labels={
            "team": "a",
            "app.kubernetes.io/instance": "team-data",
            objects.REPOSITORY_LABEL: "r",
        },
        annotations={
            "note": "keep",
            "argocd.argoproj.io/tracking-id": "team-data:anynines.com/PostgresqlInstance:team/db",
            "argocd.argoproj.io/sync-options": "ServerSideApply=true",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
        },
        managedFields=[{"manager": "argocd-controller", "operation": "Apply"}],
    )
    assert objects.mirrored_body(live) == {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {
            "name": "db",
            "namespace": "team",
            "labels": {"team": "a"},
            "annotations": {"note": "keep"},
        },
        "spec": live["spec"],
    }


def test_mirrored_body_strips_argocds_tracking_label_as_the_informer_caches_the_object() -> None:
    """Argo CD's default label tracking (argoproj/argo-cd util/argo/resource_tracking.go) leaves
    only ``app.kubernetes.io/instance`` and its field manager ``argocd-controller``: the cache
    keeps the managers (not the field sets), enough to tell Argo CD's label from a person's."""
    full = [
        {
            "manager": "argocd-controller",
            "operation": "Apply",
            "apiVersion": "anynines.com/v1",
            "time": "2026-11-24T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:app.kubernetes.io/instance": {}}}},
        },
        {"manager": "klutch-gitops", "operation": "Apply", "subresource": "status"},
    ]
    cached = managers(full)
    assert cached == [
        {"manager": "argocd-controller", "operation": "Apply"},
        {"manager": "klutch-gitops", "operation": "Apply", "subresource": "status"},
    ]
    live = tool_applied(
        labels={"team": "a", "app.kubernetes.io/instance": "team-data"},
        managedFields=cached,
    )
    assert objects.mirrored_body(live)["metadata"]["labels"] == {"team": "a"}
    # without the managers (as the cache held it before) the label passed for a person's
    bare = tool_applied(labels={"team": "a", "app.kubernetes.io/instance": "team-data"})
    assert "app.kubernetes.io/instance" in objects.mirrored_body(bare)["metadata"]["labels"]


def test_mirrored_body_strips_flux_bookkeeping_and_keeps_a_persons_instance_label() -> None:
    live = tool_applied(
        labels={
            "app.kubernetes.io/instance": "orders",  # the person's, not Argo CD's tracking
            "kustomize.toolkit.fluxcd.io/name": "team-data",
            "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
        },
        managedFields=[{"manager": "kustomize-controller", "operation": "Apply"}],
    )
    body = objects.mirrored_body(live)
    assert body["metadata"] == {
        "name": "db",
        "namespace": "team",
        "labels": {"app.kubernetes.io/instance": "orders"},
    }
    assert "status" not in body
    body["spec"]["plan"] = "changed"  # a copy: the informer's cache stays as it is
    assert live["spec"]["plan"] == "postgresql-single-nano"


def test_adoption_takes_only_our_label_and_finalizer_and_needs_the_same_object() -> None:
    live = tool_applied(finalizers=None, labels={"kustomize.toolkit.fluxcd.io/name": "x"})
    body = objects.adoption_object(live, "repo")
    assert body == {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {
            "name": "db",
            "namespace": "team",
            "uid": "u-1",  # a precondition: never recreates an object deleted meanwhile
            "labels": {objects.REPOSITORY_LABEL: "repo"},
            "finalizers": [objects.FINALIZER],
        },
    }
    adopted = tool_applied(labels={objects.REPOSITORY_LABEL: "repo"})
    assert objects.adoption_object(adopted, "repo") is None
    assert objects.repository_of(adopted) == "repo"
    assert objects.repository_of(live) is None


def status_of(live: dict, upstream: dict, in_sync: bool, **inputs: Any) -> dict[str, Any]:
    """The App status a claim gets (``app_status``); these cases all change it."""
    status = app_status(AppStatusInputs(live, upstream, NOW, in_sync, **inputs))
    assert status is not None
    return status


def test_status_generations_are_counted_in_app_generations() -> None:
    upstream = {
        "metadata": {"generation": 1},  # a recreated copy starts again at 1
        "status": {
            "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}],
        },
    }
    live = tool_applied()  # generation 2
    live.pop("status")
    status = status_of(live, upstream, in_sync=True)
    assert "observedGeneration" not in status  # not declared in this schema (top=False)
    assert status["conditions"][0]["observedGeneration"] == 2
    # the copy does not have the App spec yet: conditions count one generation behind
    stale = status_of(live, upstream, in_sync=False)
    assert "observedGeneration" not in stale
    assert stale["conditions"][0]["observedGeneration"] == 1
    # equal after translation: nothing to write
    assert app_status(AppStatusInputs({**live, "status": status}, upstream, NOW)) is None
    assert upstream["status"]["observedGeneration"] == 1  # the cache is never changed


def test_unstamped_conditions_get_our_generation_only_where_the_schema_declares_it() -> None:
    """Crossplane 1.20's claims: conditions without observedGeneration, and a schema without
    the field (internal/xcrd/schemas.go): nothing is added. 2.x's schema has it."""
    upstream = {
        "metadata": {"generation": 4},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]},
    }
    live = tool_applied()  # generation 2
    live.pop("status")
    plain = status_of(live, upstream, in_sync=True)
    assert plain == upstream["status"]
    stamped = status_of(live, upstream, in_sync=True, stamps=True)
    assert stamped["conditions"][0]["observedGeneration"] == 2
    refused = status_of(live, upstream, in_sync=False, refused="no", stamps=True)
    by_type = {c["type"]: c for c in refused["conditions"]}
    assert by_type["Synced"]["observedGeneration"] == 2  # the refusal observed generation 2
    assert by_type["Ready"]["observedGeneration"] == 1  # unconfirmed: the one before
    assert "observedGeneration" not in refused
    unstamped = status_of(live, upstream, in_sync=False, refused="no")
    assert all("observedGeneration" not in c for c in unstamped["conditions"])


def test_kubectls_fields_are_taken_over_and_other_tools_keep_theirs() -> None:
    """Flux's cleanup list (kustomization_controller.go): kubectl by prefix, Apply and Update,
    and before-first-apply; subresources and other managers stay."""
    entries = [
        {"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsV1": {"f:spec": {}}},
        {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:spec": {}}},
        {"manager": "kubectl-edit", "operation": "Update", "subresource": "status"},
        {"manager": "before-first-apply", "operation": "Update"},
        {"manager": "argocd-controller", "operation": "Apply"},
        {"manager": "klutch-gitops", "operation": "Apply"},
    ]
    assert objects.without_kubectl_managers(entries) == [entries[2], entries[4], entries[5]]
    assert objects.without_kubectl_managers(entries[4:]) is None
    assert objects.without_kubectl_managers(entries[:1]) == [{}]  # [] would be ignored
