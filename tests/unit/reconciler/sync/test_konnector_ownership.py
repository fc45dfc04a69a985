"""One ownership model for App Cluster CRDs, shared with Klutch's konnector.

The konnector creates a CRD from an APIServiceExport with a controller owner reference to the
APIServiceBinding of the same name and refuses any CRD without it as
``ForeignCustomResourceDefinition`` (``ensureCRDs`` in anynines/klutchio
bind/pkg/konnector/controllers/cluster/servicebinding/servicebinding_reconcile.go, the check
``IsOwnedByBinding`` in bind/pkg/apis/bind/v1alpha1/helpers/crd.go).
"""

from __future__ import annotations

from reconciler.controllers.namespaces import role_rules
from reconciler.sync import app_crds, objects

BINDING = {
    "apiVersion": "klutch.anynines.com/v1alpha1",
    "kind": "APIServiceBinding",
    "metadata": {"name": "postgresqlinstances.anynines.com", "uid": "b-1"},
}
EXPORT = {
    "metadata": {"name": "postgresqlinstances.anynines.com"},
    "spec": {
        "group": "anynines.com",
        "names": {"kind": "PostgresqlInstance", "plural": "postgresqlinstances"},
        "scope": "Namespaced",
        "versions": [{"name": "v1", "served": True, "storage": True}],
    },
}


def konnector_crd(uid: str = "b-1") -> dict:
    """A CRD as the konnector creates it: no label of ours, its binding as controller owner."""
    return {
        "metadata": {
            "name": EXPORT["metadata"]["name"],
            "ownerReferences": [
                {
                    "apiVersion": "klutch.anynines.com/v1alpha1",
                    "kind": "APIServiceBinding",
                    "name": EXPORT["metadata"]["name"],
                    "uid": uid,
                    "controller": True,
                }
            ],
        }
    }


def test_our_crd_carries_the_owner_reference_the_konnector_checks() -> None:
    crd = app_crds.crd_from_export(EXPORT, BINDING)
    assert crd["metadata"]["ownerReferences"] == konnector_crd()["metadata"]["ownerReferences"]
    assert crd["metadata"]["annotations"] == {objects.BOUND_ANNOTATION: "true"}
    assert app_crds.owned_by_binding(crd, BINDING)


def test_without_a_binding_the_crd_has_no_owner_reference() -> None:
    assert "ownerReferences" not in app_crds.crd_from_export(EXPORT)["metadata"]


def test_a_binding_being_deleted_gets_no_owner_reference() -> None:
    """``kubectl delete apiservicebinding --cascade=orphan``: the garbage collector drops the
    reference first; put back, it would have the CRD and every claim collected once the binding
    is gone (seen in tests/integration/test_konnector.py's teardown)."""
    deleting = {
        **BINDING,
        "metadata": {**BINDING["metadata"], "deletionTimestamp": "2026-11-24T17:00:00Z"},
    }
    assert "ownerReferences" not in app_crds.crd_from_export(EXPORT, deleting)["metadata"]


def test_the_reconciler_accepts_a_crd_the_konnector_created_for_the_same_binding() -> None:
    assert app_crds.owns_crd(konnector_crd(), BINDING)


def test_a_crd_of_another_binding_or_without_one_stays_foreign() -> None:
    assert not app_crds.owns_crd(konnector_crd(uid="b-2"), BINDING)
    assert not app_crds.owns_crd(konnector_crd(), None)
    other = konnector_crd()
    other["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1alpha1"
    assert not app_crds.owns_crd(other, BINDING)


def test_klutchs_check_accepts_any_uid_when_the_binding_has_none() -> None:
    # IsOwnedByBinding: `if uid == "" || ref.UID == uid`
    assert app_crds.owned_by_binding(
        konnector_crd(uid="x"), {"metadata": {"name": BINDING["metadata"]["name"]}}
    )


def test_the_binders_own_role_keeps_claimed_secrets_read_only() -> None:
    """The konnector's makeProviderOwner Update comes from the ClusterRole
    klutch-binder-claimed-secrets, bound beside this Role
    (tests/unit/klutch_gitops/test_binder_roles.py): RBAC lets only a holder put it into a Role, and
    the reconciler's identity may not write a tenant's Secrets (tests/integration/test_chart.py),
    but it may bind that one ClusterRole."""
    export = {
        "metadata": {"name": "postgresqlinstances.anynines.com"},
        "spec": {
            "group": "anynines.com",
            "names": {"plural": "postgresqlinstances"},
            "permissionClaims": [{"group": "", "resource": "secrets", "version": "v1"}],
        },
    }
    secrets = [r for r in role_rules([export]) if r["resources"] == ["secrets"]]
    assert secrets == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}
    ]


def test_a_secret_the_konnector_marked_is_left_to_the_konnector() -> None:
    marked = {"metadata": {"annotations": {objects.RESOURCE_OWNER: "Provider"}}}
    assert objects.claimed_by_konnector(marked)
    assert not objects.claimed_by_konnector({"metadata": {"name": "db-conn"}})


def test_our_app_claims_carry_klutchs_bound_mark_and_our_repository_label() -> None:
    from tests.unit.reconciler.sync.test_objects import make_claim

    body = objects.app_object(make_claim(), "team-repo", "claims", "c0ffee", None)
    assert body["metadata"]["annotations"][objects.BOUND_ANNOTATION] == "true"
    assert body["metadata"]["labels"][objects.REPOSITORY_LABEL] == "team-repo"
    assert body["metadata"]["finalizers"] == ["klutch.anynines.com/syncer"]  # the konnector's too
