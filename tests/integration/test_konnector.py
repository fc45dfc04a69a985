"""Klutch's konnector beside the reconciler, one App claim being one Control Plane claim.

Klutch's konnector binary is on no package registry, so ``Konnector`` below applies its rules
as anynines/klutchio's source states them, with the same credentials it has (the binder
kubeconfig for the Control Plane, an App Cluster admin for the consumer side):

- spec: ``reconcile`` in bind/pkg/konnector/controllers/cluster/serviceexport/spec/
  spec_reconcile.go — every App object of a bound kind in every namespace (its informer has no
  selector: spec_controller.go), App namespace X mapped through the APIServiceNamespace X in the
  consumer namespace (created when missing, waited for until ``status.namespace``), the upstream
  object of the same name created there with ``klutch.anynines.com/bound`` (adopt/util.go) or its
  spec server-side applied with manager ``klutch.anynines.com``, force (spec_controller.go);
  the downstream finalizer ``klutch.anynines.com/syncer`` (apis/bind/v1alpha1/
  apiservicebinding_types.go ``DownstreamFinalizer``).
- status: ``reconcile`` in .../serviceexport/status/status_reconcile.go — the upstream status
  copied onto the App object with an update of its status subresource when it differs.
- claimed Secrets: ``reconcile`` in .../claimedresources/claimedresources_reconciler.go — owner by
  ``determineOwner``; a provider-owned Secret gets ``klutch.anynines.com/resource-owner:
  Provider`` with an Update of the upstream object (``makeProviderOwner``, the Update call in
  claimedresources_controller.go) and a downstream copy created when missing
  (``candidateFromOwnerObj``) or replaced whenever it differs.

Our mapped-namespace Role refuses that Update (the test asserts it); the test then grants it by
hand, as issue 13's user did, to show that the konnector's App copy and the reconciler's do not
fight: the reconciler leaves a Secret with the konnector's mark to the konnector.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from bind_api.namespaces import API_SERVICE_NAMESPACES, BINDER, ROLE_BINDINGS, ROLES
from klutch_gitops.kube import SECRETS, Kube, KubeError, Resource, api_client

from .gitops import POSTGRES, Tenant, claim, eventually, make_tenant, ready_status

BOUND = "klutch.anynines.com/bound"
DOWNSTREAM_FINALIZER = "klutch.anynines.com/syncer"
RESOURCE_OWNER = "klutch.anynines.com/resource-owner"
APPLY_MANAGER = "klutch.anynines.com"


class Konnector:
    """The konnector's rules for one consumer namespace (its ``providerNamespace``)."""

    def __init__(self, app: Kube, provider: Kube, consumer: str) -> None:
        self.app, self.provider, self.consumer = app, provider, consumer

    def target(self, namespace: str) -> str | None:
        """spec_reconcile.go: the APIServiceNamespace, created when missing; None until mapped."""
        mapping = self.provider.get(API_SERVICE_NAMESPACES, self.consumer, namespace)
        if mapping is None:
            mapping = self.provider.create(
                API_SERVICE_NAMESPACES,
                {
                    "apiVersion": API_SERVICE_NAMESPACES.api_version,
                    "kind": "APIServiceNamespace",
                    "metadata": {"name": namespace, "namespace": self.consumer},
                },
            )
        return (mapping.get("status") or {}).get("namespace") or None

    def sync_spec(self, resource: Resource, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        target = self.target(meta["namespace"])
        if target is None:
            return  # requeued after a second by the konnector
        upstream = self.provider.get(resource, target, meta["name"])
        if meta.get("deletionTimestamp"):
            return
        if DOWNSTREAM_FINALIZER not in (meta.get("finalizers") or []):
            changed = copy.deepcopy(obj)
            changed["metadata"]["finalizers"] = [
                *(meta.get("finalizers") or []),
                DOWNSTREAM_FINALIZER,
            ]
            obj = self.app.replace(resource, changed)
        if upstream is None:
            created = copy.deepcopy(obj)
            created["metadata"] = {
                k: v
                for k, v in obj["metadata"].items()
                if k
                not in (
                    "uid",
                    "resourceVersion",
                    "managedFields",
                    "ownerReferences",
                    "finalizers",
                    "creationTimestamp",
                    "generation",
                )
            }
            created["metadata"]["namespace"] = target
            created["metadata"]["annotations"] = {
                **(obj["metadata"].get("annotations") or {}),
                BOUND: "true",
            }
            created.pop("status", None)
            try:
                self.provider.create(resource, created)
            except KubeError as error:
                if not error.conflict:  # AlreadyExists waits for the requeue
                    raise
            return
        if obj.get("spec") == upstream.get("spec"):
            return
        self.provider.apply(
            resource,
            {
                "apiVersion": upstream["apiVersion"],
                "kind": upstream["kind"],
                "metadata": {
                    "name": meta["name"],
                    "namespace": target,
                    "annotations": {BOUND: "true"},
                },
                "spec": obj.get("spec"),
            },
            field_manager=APPLY_MANAGER,
            force=True,
        )

    def sync_status(self, resource: Resource, namespace: str, name: str) -> None:
        target = self.target(namespace)
        upstream = self.provider.get(resource, target, name) if target else None
        downstream = self.app.get(resource, namespace, name)
        if upstream is None or downstream is None:
            return
        if downstream.get("status") == upstream.get("status"):
            return
        downstream["status"] = upstream.get("status")
        self.app._call(  # the konnector's UpdateStatus: a PUT of the status subresource
            "PUT",
            resource.path(namespace, name, "status"),
            body=downstream,
        )

    def sync_secret(self, namespace: str, name: str) -> None:
        """claimedresources_reconciler.go ``reconcile``, the Provider-owned branch."""
        target = self.target(namespace)
        provider = self.provider.get(SECRETS, target, name) if target else None
        consumer = self.app.get(SECRETS, namespace, name)
        if provider is None:
            return  # nothing of ours in this test deletes a provider Secret
        if owner_of(provider, consumer) != "Provider":
            return  # consumer-owned: the konnector would copy it up, not this test's case
        marked = copy.deepcopy(provider)  # makeProviderOwner, an Update when it changes
        marked["metadata"].setdefault("annotations", {})[RESOURCE_OWNER] = "Provider"
        if marked != provider:
            self.provider.replace(SECRETS, marked)
        if consumer is None:
            candidate = candidate_from_owner(namespace, provider)
            candidate["metadata"].setdefault("annotations", {})[RESOURCE_OWNER] = "Provider"
            self.app.create(SECRETS, candidate)
            return
        candidate = candidate_from_owner(namespace, provider)
        if candidate != consumer:  # reflect.DeepEqual: never equal to a live object (uid, rv)
            self.app.replace(SECRETS, candidate)


def owner_of(provider: dict | None, consumer: dict | None) -> str | None:
    """``determineOwner``: the provider's annotation, else the consumer's, else who exists."""
    for obj, other, side in ((provider, consumer, "Provider"), (consumer, provider, "Consumer")):
        if obj is None:
            continue
        value = (obj["metadata"].get("annotations") or {}).get(RESOURCE_OWNER)
        if value in ("Provider", "Consumer"):
            return value
        if not value and other is None:
            return side
    return None


def candidate_from_owner(namespace: str, obj: dict) -> dict:
    """``candidateFromOwnerObj``: the owner's copy without uid, resourceVersion, managed fields,
    deletion fields, owner references and finalizers, in the other side's namespace."""
    candidate = copy.deepcopy(obj)
    meta = candidate["metadata"]
    for key in (
        "uid",
        "resourceVersion",
        "managedFields",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "ownerReferences",
        "finalizers",
    ):
        meta.pop(key, None)
    meta["namespace"] = namespace
    return candidate


def grant_update_by_hand(admin: Kube, namespace: str, consumer: str) -> None:
    """What Klutch's binder Role has and ours has not: update on the Secrets of a namespace."""
    meta = {"name": "konnector-claimed-secrets", "namespace": namespace}
    admin.create(
        ROLES,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["update"]}],
        },
    )
    admin.create(
        ROLE_BINDINGS,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": meta["name"],
            },
            "subjects": [{"kind": "ServiceAccount", "name": BINDER, "namespace": consumer}],
        },
    )


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    world = make_tenant(stack, clusters, tmp_path)
    yield world
    world.reconciler.stop()


def provide(tenant: Tenant, namespace: str, name: str) -> None:
    """What a provider does in a mapped namespace: Ready status and a connection Secret."""
    tenant.control_plane.apply(
        POSTGRES,
        {
            "apiVersion": "anynines.com/v1",
            "kind": "PostgresqlInstance",
            "metadata": {"name": name, "namespace": namespace},
            "status": ready_status(),
        },
        field_manager="provider",
        force=True,
        subresource="status",
    )
    tenant.control_plane.apply(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-conn", "namespace": namespace},
            "data": {"password": "c2VjcmV0"},
        },
        field_manager="provider",
        force=True,
    )


def test_the_konnectors_rules_beside_the_reconciler_keep_one_control_plane_claim_per_app_claim(
    tenant: Tenant, clusters: dict[str, client.ApiClient], tmp_path: Path
) -> None:
    binder = Kube(api_client(tmp_path / "binder.kubeconfig"))
    konnector = Konnector(tenant.app, binder, tenant.consumer)

    # A namespace managed from Git, and one managed with kubectl (the konnector's alone).
    tenant.push({"claims/orders.yaml": claim("orders", tenant.namespace)})
    eventually(
        lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "orders"),
        "the reconciler's copy (and the App CRD it serves)",
    )
    manual = f"kubectl-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(clusters["app"]).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=manual))
    )
    tenant.app.create(
        POSTGRES,
        {
            "apiVersion": "anynines.com/v1",
            "kind": "PostgresqlInstance",
            "metadata": {"name": "shop", "namespace": manual},
            "spec": {
                "service": "a9s-postgresql13",
                "plan": "postgresql-single-nano",
                "writeConnectionSecretToRef": {"name": "shop-conn"},
            },
        },
    )

    def konnector_pass() -> None:
        for namespace in (tenant.namespace, manual):
            for obj in tenant.app.list(POSTGRES, namespace)[0]:
                konnector.sync_spec(POSTGRES, obj)
                konnector.sync_status(POSTGRES, namespace, obj["metadata"]["name"])
                konnector.sync_secret(namespace, f"{obj['metadata']['name']}-conn")

    def manual_mapped() -> str | None:
        konnector_pass()
        return konnector.target(manual)

    shop_target = eventually(manual_mapped, "the kubectl namespace's mapping", timeout=60)
    assert konnector.target(tenant.namespace) == tenant.mapped  # the same mapping as ours
    eventually(
        lambda: konnector_pass() or tenant.control_plane.get(POSTGRES, shop_target, "shop"),
        "the konnector's copy of the kubectl-managed claim",
    )
    provide(tenant, tenant.mapped, "orders")
    provide(tenant, shop_target, "shop")

    # Our mapped-namespace Role keeps claimed Secrets read-only: the konnector's Update is refused
    # (it then retries with back-off and writes no App copy). Issue 13's user granted it by hand;
    # so does this test, to prove that the konnector's copy and the reconciler's do not fight.
    provided = tenant.control_plane.get(SECRETS, tenant.mapped, "orders-conn")
    with pytest.raises(KubeError) as refused:
        binder.replace(SECRETS, provided)
    assert refused.value.status == 403
    for mapped in (tenant.mapped, shop_target):
        grant_update_by_hand(tenant.control_plane, mapped, tenant.consumer)

    def settled() -> bool:
        konnector_pass()
        orders = tenant.app.get(POSTGRES, tenant.namespace, "orders") or {}
        shop = tenant.app.get(POSTGRES, manual, "shop") or {}
        return bool(
            orders.get("status")
            and shop.get("status")
            and tenant.app.get(SECRETS, tenant.namespace, "orders-conn")
            and tenant.app.get(SECRETS, manual, "shop-conn")
        )

    eventually(settled, "status and credentials in both namespaces", timeout=60)

    # Both tools running side by side for a while: no status or Secret fight.
    def versions() -> dict[str, str]:
        return {
            "orders": tenant.app.get(POSTGRES, tenant.namespace, "orders")["metadata"][
                "resourceVersion"
            ],
            "shop": tenant.app.get(POSTGRES, manual, "shop")["metadata"]["resourceVersion"],
            "orders-conn": tenant.app.get(SECRETS, tenant.namespace, "orders-conn")["metadata"][
                "resourceVersion"
            ],
            "shop-conn": tenant.app.get(SECRETS, manual, "shop-conn")["metadata"][
                "resourceVersion"
            ],
        }

    def quiet() -> bool:  # converged: nothing moved over two seconds of both tools running
        first = versions()
        for _ in range(4):
            konnector_pass()
            time.sleep(0.5)
        return versions() == first

    eventually(quiet, "both tools to converge", timeout=30)
    before = versions()
    for _ in range(40):  # twenty seconds more: a fight would move a resourceVersion
        konnector_pass()
        time.sleep(0.5)
    assert versions() == before

    # Credentials reached both namespaces, from the konnector, the one writer that is left.
    for namespace, name in ((tenant.namespace, "orders-conn"), (manual, "shop-conn")):
        secret = tenant.app.get(SECRETS, namespace, name)
        assert secret["data"] == {"password": "c2VjcmV0"}
        assert secret["metadata"]["annotations"][RESOURCE_OWNER] == "Provider"
    # Even with update granted by hand, the binder creates and deletes no Secret there.
    for call in (
        lambda: binder.create(
            SECRETS, {"metadata": {"name": "planted", "namespace": tenant.mapped}, "data": {}}
        ),
        lambda: binder.delete(SECRETS, tenant.mapped, "orders-conn"),
    ):
        with pytest.raises(KubeError) as refused:
            call()
        assert refused.value.status == 403

    # One App claim is one Control Plane claim, in each namespace.
    assert [
        o["metadata"]["name"] for o in tenant.control_plane.list(POSTGRES, tenant.mapped)[0]
    ] == ["orders"]
    assert [o["metadata"]["name"] for o in tenant.control_plane.list(POSTGRES, shop_target)[0]] == [
        "shop"
    ]
