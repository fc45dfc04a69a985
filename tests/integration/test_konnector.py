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
- status commits: merge patches of the ClusterBinding's and the exports' status subresources.
- what runs before any of that, with the same binder kubeconfig: the provider-side informers
  over the consumer namespace (Secrets and ClusterBindings: cluster_controller.go), the
  ClusterBinding's kubeconfig Secret followed and copied to the App Cluster
  (clusterbinding/clusterbinding_reconcile.go ``ensureConsumerSecret``), and a get of the
  consumer namespace for its UID (serviceexport/serviceexport_reconcile.go ``ensureControllers``).

Our RBAC alone lets all of it run (the binder's Roles and the ClusterRoles of catalog/rbac): no
permission is granted by hand. With the App Cluster's APIServiceBinding in place, our App CRD
carries its controller owner reference, which Klutch's ``IsOwnedByBinding``
(bind/pkg/apis/bind/v1alpha1/helpers/crd.go) accepts on the running cluster.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from bind_api.bindings import BINDER_SECRET, cluster_binding, secret
from klutch_gitops.apis import (
    API_SERVICE_BINDINGS,
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    CLUSTER_BINDINGS,
)
from klutch_gitops.kube.client import Kube, KubeError, Resource, api_client
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.resources import CRDS, NAMESPACES, SECRETS
from reconciler.manager import Reconciler
from reconciler.sync.app_crds import owned_by_binding
from tests.kit.claims import POSTGRES, claim, ready_status
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

BOUND = "klutch.anynines.com/bound"
DOWNSTREAM_FINALIZER = "klutch.anynines.com/syncer"
RESOURCE_OWNER = "klutch.anynines.com/resource-owner"
APPLY_MANAGER = "klutch.anynines.com"
API = "postgresqlinstances.anynines.com"
KLUTCH_BIND = "klutch-bind"  # where kubectl-bind keeps the konnector's kubeconfig Secret
POLL_SECONDS = 5.0  # the reconciler polls often, so a fight would show within the hold
HOLD_SECONDS = 120  # "a few minutes" of both tools running (issue 13)


class Konnector:
    """The konnector's rules for one consumer namespace (its ``providerNamespace``)."""

    def __init__(self, app: Kube, provider: Kube, consumer: str) -> None:
        self.app, self.provider, self.consumer = app, provider, consumer

    def start_informers(self) -> str:
        """cluster_controller.go: informers over the consumer namespace (``WithNamespace
        (providerNamespace)``) for Secrets and ClusterBindings, each a list and a watch; then
        serviceexport_reconcile.go ``ensureControllers`` gets that namespace: returns its UID."""
        for resource in (SECRETS, CLUSTER_BINDINGS, API_SERVICE_NAMESPACES):
            _, version = self.provider.list(resource, self.consumer)
            for _event in self.provider.watch(resource, self.consumer, version, timeout_seconds=1):
                pass
        return self.provider.get(NAMESPACES, None, self.consumer)["metadata"]["uid"]

    def commit_status(self) -> None:
        """The committer's merge patches of status subresources: the ClusterBinding's heartbeat
        (clusterbinding_reconcile.go ``ensureHeartbeat``, ``ensureKonnectorVersion``) and the
        CRD's accepted names copied onto the export (serviceexport_reconcile.go
        ``ensureCRDConditionsCopied``)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.provider.patch(
            CLUSTER_BINDINGS,
            self.consumer,
            "cluster",
            {"status": {"heartbeatInterval": "5m0s", "lastHeartbeatTime": now}},
            subresource="status",
        )
        for export in self.provider.list(API_SERVICE_EXPORTS, self.consumer)[0]:
            crd = self.app.get(CRDS, None, export["metadata"]["name"])
            if crd is not None:
                self.provider.patch(
                    API_SERVICE_EXPORTS,
                    self.consumer,
                    export["metadata"]["name"],
                    {"status": {"acceptedNames": crd["status"]["acceptedNames"]}},
                    subresource="status",
                )

    def ensure_consumer_secret(self, namespace: str, name: str) -> None:
        """clusterbinding_reconcile.go ``ensureConsumerSecret``: the ClusterBinding ``cluster``
        names the kubeconfig Secret, read from the provider Secret informer's cache (a list of
        the consumer namespace) and copied to the App Cluster Secret the APIServiceBinding
        names (created, or its data and type updated)."""
        bindings = self.provider.list(CLUSTER_BINDINGS, self.consumer)[0]
        (binding,) = [b for b in bindings if b["metadata"]["name"] == "cluster"]
        ref = binding["spec"]["kubeconfigSecretRef"]
        cached = {s["metadata"]["name"]: s for s in self.provider.list(SECRETS, self.consumer)[0]}
        provided = cached[ref["name"]]
        assert ref["key"] in provided["data"]
        consumer = self.app.get(SECRETS, namespace, name)
        if consumer is None:
            self.app.create(
                SECRETS,
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "data": provided["data"],
                    "type": provided.get("type", "Opaque"),
                },
            )
        elif (consumer.get("data"), consumer.get("type")) != (
            provided["data"],
            provided.get("type"),
        ):
            consumer["data"], consumer["type"] = provided["data"], provided.get("type")
            self.app.replace(SECRETS, consumer)

    def target(self, namespace: str) -> str | None:
        """spec_reconcile.go: the APIServiceNamespace, created when missing; None until mapped."""
        mapping = self.provider.get(API_SERVICE_NAMESPACES, self.consumer, namespace)
        if mapping is None:
            try:
                mapping = self.provider.create(
                    API_SERVICE_NAMESPACES,
                    {
                        "apiVersion": API_SERVICE_NAMESPACES.api_version,
                        "kind": "APIServiceNamespace",
                        "metadata": {"name": namespace, "namespace": self.consumer},
                    },
                )
            except KubeError as error:
                if error.status != 409:
                    raise
                return None  # made meanwhile (the reconciler asks for the same): the next sync
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


@pytest.fixture
def tenant(stack, clusters, tmp_path: Path) -> Iterator[Tenant]:
    """A bound consumer whose reconciler polls every few seconds, and the App Cluster's
    APIServiceBinding CRD (cluster-scoped, as Klutch's), so the reconciler watches bindings."""
    install_crds(clusters["app"], load_crds(cluster="app"))
    world = make_tenant(stack, clusters, tmp_path, start=False)
    world.config = dataclasses.replace(world.config, poll_interval=POLL_SECONDS)
    world.reconciler = Reconciler(world.config).start()
    yield world
    world.reconciler.stop()


@pytest.fixture
def app_binding(tenant: Tenant) -> Iterator[str]:
    """kubectl-bind's App Cluster side: the Secret the konnector's kubeconfig goes to (its name)
    and the cluster-scoped APIServiceBinding named after the export; deleted with
    ``--cascade=orphan`` afterwards, so the CRD it owns and every claim of the kind stay."""
    if tenant.app.get(NAMESPACES, None, KLUTCH_BIND) is None:
        tenant.app.create(NAMESPACES, {"metadata": {"name": KLUTCH_BIND}})
    if tenant.app.get(API_SERVICE_BINDINGS, None, API) is not None:
        pytest.fail(f"APIServiceBinding {API} is left over from another test")
    name = f"kubeconfig-{uuid.uuid4().hex[:6]}"
    yield name
    # With the reconciler still running, as in the README's hand-over: the CRD must lose the
    # owner reference and stay (put back, the garbage collector would take the CRD and every
    # claim of its kind once the binding is gone).
    tenant.app.delete(API_SERVICE_BINDINGS, None, API, propagation="Orphan")
    eventually(lambda: tenant.app.get(API_SERVICE_BINDINGS, None, API) is None, "the binding gone")
    tenant.app.delete(SECRETS, KLUTCH_BIND, name)
    time.sleep(5)  # the garbage collector's turn, and a pass of the reconciler
    crd = tenant.app.get(CRDS, None, API)
    assert crd is not None, f"CRD {API} was collected with its APIServiceBinding"
    assert not crd["metadata"].get("deletionTimestamp"), f"CRD {API} is being collected"
    assert not crd["metadata"].get("ownerReferences"), crd["metadata"]["ownerReferences"]


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


def run_konnector(konnector: Konnector, app_binding: str, namespaces: tuple[str, ...]) -> None:
    """One pass of the konnector over the App namespaces: its kubeconfig Secret, and each
    claim's spec, status and connection Secret."""
    konnector.ensure_consumer_secret(KLUTCH_BIND, app_binding)
    for namespace in namespaces:
        for obj in konnector.app.list(POSTGRES, namespace)[0]:
            konnector.sync_spec(POSTGRES, obj)
            konnector.sync_status(POSTGRES, namespace, obj["metadata"]["name"])
            konnector.sync_secret(namespace, f"{obj['metadata']['name']}-conn")


def settled(konnector_pass: Callable[[], None], app: Kube, namespace: str, manual: str) -> bool:
    """Status and credentials on the App claims of both namespaces, after a konnector pass."""
    konnector_pass()  # its makeProviderOwner Update runs with the binder kubeconfig
    orders = app.get(POSTGRES, namespace, "orders") or {}
    shop = app.get(POSTGRES, manual, "shop") or {}
    return bool(
        orders.get("status")
        and shop.get("status")
        and app.get(SECRETS, namespace, "orders-conn")
        and app.get(SECRETS, manual, "shop-conn")
    )


def resource_versions(watched: list[tuple[str, Kube, Resource, str, str]]) -> dict[str, str]:
    """The resourceVersion of each watched object, by cluster, resource, namespace and name."""
    return {
        f"{cluster}:{resource.plural}/{namespace}/{name}": kube.get(resource, namespace, name)[
            "metadata"
        ]["resourceVersion"]
        for cluster, kube, resource, namespace, name in watched
    }


def quiet(konnector_pass: Callable[[], None], versions: Callable[[], dict[str, str]]) -> bool:
    """Converged: nothing moved over two seconds of both tools running."""
    first = versions()
    for _ in range(4):
        konnector_pass()
        time.sleep(0.5)
    return versions() == first


def run_beside(konnector_pass: Callable[[], None], seconds: float) -> None:
    """Konnector passes for ``seconds`` while the reconciler runs in its own threads."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        konnector_pass()
        time.sleep(0.5)


def test_the_konnector_runs_beside_the_reconciler_on_our_rbac_alone(
    tenant: Tenant, app_binding: str, clusters: dict[str, client.ApiClient], tmp_path: Path
) -> None:
    admin = tenant.control_plane
    binder_kubeconfig = (tmp_path / "binder.kubeconfig").read_text()
    binder = Kube(api_client(tmp_path / "binder.kubeconfig"))
    konnector = Konnector(tenant.app, binder, tenant.consumer)

    # What the bind API adds to the consumer namespace (bind_api/bindings.py): the ClusterBinding
    # and the binder kubeconfig Secret it names.
    admin.apply(
        SECRETS,
        secret(tenant.consumer, BINDER_SECRET, {"kubeconfig": binder_kubeconfig}),
        field_manager="klutch-gitops-bind",
        force=True,
    )
    admin.apply(
        CLUSTER_BINDINGS,
        cluster_binding(tenant.consumer),
        field_manager="klutch-gitops-bind",
        force=True,
    )

    # Before any sync, with the binder kubeconfig: its informers, the namespace UID, and the
    # kubeconfig Secret followed to the App Cluster, where kubectl-bind's APIServiceBinding
    # names it. No permission is granted by hand anywhere in this test.
    uid = konnector.start_informers()
    assert uid == admin.get(NAMESPACES, None, tenant.consumer)["metadata"]["uid"]
    konnector.ensure_consumer_secret(KLUTCH_BIND, app_binding)
    copied = tenant.app.get(SECRETS, KLUTCH_BIND, app_binding)
    assert base64.b64decode(copied["data"]["kubeconfig"]).decode() == binder_kubeconfig
    tenant.app.create(
        API_SERVICE_BINDINGS,
        {
            "apiVersion": API_SERVICE_BINDINGS.api_version,
            "kind": API_SERVICE_BINDINGS.kind,
            "metadata": {"name": API},
            "spec": {
                "kubeconfigSecretRef": {
                    "namespace": KLUTCH_BIND,
                    "name": app_binding,
                    "key": "kubeconfig",
                }
            },
        },
    )

    # A namespace managed from Git, and one managed with kubectl (the konnector's alone).
    tenant.push({"claims/orders.yaml": claim("orders", tenant.namespace)})
    eventually(
        lambda: admin.get(POSTGRES, tenant.mapped, "orders"),
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

    # The App CRD carries the controller owner reference to the APIServiceBinding, and Klutch's
    # IsOwnedByBinding (reconciler/sync/app_crds.py replicates it) accepts it on the running
    # cluster.
    binding = tenant.app.get(API_SERVICE_BINDINGS, None, API)
    crd = eventually(
        lambda: (
            (found := tenant.app.get(CRDS, None, API))
            and owned_by_binding(found, binding)
            and found
        ),
        "the App CRD's owner reference to the APIServiceBinding",
    )
    (owner,) = [r for r in crd["metadata"]["ownerReferences"] if r["kind"] == "APIServiceBinding"]
    assert (owner["name"], owner["uid"], owner["controller"]) == (
        API,
        binding["metadata"]["uid"],
        True,
    )

    konnector_pass = partial(run_konnector, konnector, app_binding, (tenant.namespace, manual))
    shop_target = eventually(
        lambda: konnector_pass() or konnector.target(manual),
        "the kubectl namespace's mapping",
        timeout=60,
    )
    assert konnector.target(tenant.namespace) == tenant.mapped  # the same mapping as ours
    eventually(
        lambda: konnector_pass() or admin.get(POSTGRES, shop_target, "shop"),
        "the konnector's copy of the kubectl-managed claim",
    )
    provide(tenant, tenant.mapped, "orders")
    provide(tenant, shop_target, "shop")

    eventually(
        partial(settled, konnector_pass, tenant.app, tenant.namespace, manual),
        "status and credentials in both namespaces",
        timeout=60,
    )
    konnector.commit_status()  # once: a heartbeat every few minutes, not in the hold below
    heartbeat = admin.get(CLUSTER_BINDINGS, tenant.consumer, "cluster")["status"]
    assert heartbeat["heartbeatInterval"] == "5m0s"
    for namespace, name in ((tenant.mapped, "orders-conn"), (shop_target, "shop-conn")):
        marked = admin.get(SECRETS, namespace, name)
        assert marked["metadata"]["annotations"][RESOURCE_OWNER] == "Provider"

    # Both tools running side by side for minutes: no status, claim or Secret fight.
    watched = [
        (cluster, kube, resource, namespace, f"{name}{suffix}")
        for cluster, kube, pairs in (
            ("app", tenant.app, ((tenant.namespace, "orders"), (manual, "shop"))),
            ("control-plane", admin, ((tenant.mapped, "orders"), (shop_target, "shop"))),
        )
        for namespace, name in pairs
        for resource, suffix in ((POSTGRES, ""), (SECRETS, "-conn"))
    ]

    versions = partial(resource_versions, watched)
    eventually(partial(quiet, konnector_pass, versions), "both tools to converge", timeout=30)
    before = versions()
    run_beside(konnector_pass, HOLD_SECONDS)  # a fight would move a resourceVersion
    assert versions() == before  # over HOLD_SECONDS / POLL_SECONDS = 24 polls of the reconciler

    # Credentials reached both namespaces, from the konnector, the one writer of the App copy.
    for namespace, name in ((tenant.namespace, "orders-conn"), (manual, "shop-conn")):
        secret_ = tenant.app.get(SECRETS, namespace, name)
        assert secret_["data"] == {"password": "c2VjcmV0"}
        assert secret_["metadata"]["annotations"][RESOURCE_OWNER] == "Provider"
    # The binder creates and deletes no Secret there, and updates nothing of another tenant's.
    for call in (
        lambda: binder.create(
            SECRETS, {"metadata": {"name": "planted", "namespace": tenant.mapped}, "data": {}}
        ),
        lambda: binder.delete(SECRETS, tenant.mapped, "orders-conn"),
        lambda: binder.create(
            SECRETS, {"metadata": {"name": "planted", "namespace": tenant.consumer}, "data": {}}
        ),
    ):
        with pytest.raises(KubeError) as refused:
            call()
        assert refused.value.status == 403

    # One App claim is one Control Plane claim, in each namespace.
    assert [o["metadata"]["name"] for o in admin.list(POSTGRES, tenant.mapped)[0]] == ["orders"]
    assert [o["metadata"]["name"] for o in admin.list(POSTGRES, shop_target)[0]] == ["shop"]
