"""A tenant's claim reaching past its own composite resource, on the real stack and Crossplane.

What Crossplane v1.20 does with a claim's reference fields (crossplane/crossplane v1.20.13,
internal/controller/apiextensions/claim/reconciler.go and syncer_ssa.go): a claim whose
``spec.resourceRef`` names a composite that no claim holds yet binds it, overwrites its spec with
the claim's, propagates its connection Secret into the claim's namespace and deletes it with the
claim ("A claim might be able to delete an XR it's not bound to, as long as the XR is bindable but
not yet bound"); a name that does not exist is created with that name; removing ``resourceRef``
makes it create a second composite and leave the first running, bound to nobody. A composite bound
to another claim is refused by Crossplane itself ("refusing to operate on composite resource ...
that is not bound to this claim"). ``compositionRef``/``compositionSelector`` only ever pick a
Composition whose compositeTypeRef is the claim's composite kind (composite/api.go,
APIConfigurator and APILabelSelectorResolver); ``writeConnectionSecretToRef`` of a claim is a name
in its own namespace (xcrd/schemas.go, CompositeResourceClaimSpecProps). Each attack was first
seen to work on this stack without catalog/policies/claim-references.yaml.

Tenants reach the Control Plane through Git (the reconciler, which refuses in reconcile.yaml) and
with their binder kubeconfig directly (the admission policy refuses): both are tried here.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, KubeError, Resource, api_client
from klutch_gitops.kube.resources import CRDS, NAMESPACES, SECRETS
from tests.integration.catalogstack import clusterrole_step, conditions
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

pytestmark = pytest.mark.crossplane

XP = "apiextensions.crossplane.io"
XRDS = Resource(XP, "v1", "compositeresourcedefinitions", namespaced=False)
COMPOSITIONS = Resource(XP, "v1", "compositions", namespaced=False)
VERSION = "v1alpha1"
POLICY = (
    "ValidatingAdmissionPolicy 'klutch-gitops-claim-references' with binding "
    "'klutch-gitops-claim-references' denied request: "
)
REFUSED_CREATE = (
    "spec.resourceRef may not be set: Crossplane binds each claim to a composite resource of its "
    "own, and a claim that names one could take over another tenant's or the platform's. Remove "
    "spec.resourceRef from the claim."
)
REFUSED_CHANGE = (
    "spec.resourceRef may not be changed or removed: it names the composite resource Crossplane "
    "bound this claim to. Leave spec.resourceRef out of what you apply (or keep the value "
    "Crossplane wrote)."
)
PLATFORM_SECRET = "platform-only-secret"
TENANT_SECRET = "tenant-value"
SETTLE = 120.0


@dataclass(frozen=True)
class Gadgets:
    """An XRD whose claims tenants are offered, and its Compositions."""

    group: str
    claim_crd: dict[str, Any]
    composition: str  # what tenants use
    platform_composition: str  # what the platform's own composite uses (another secret)
    other_kind: str  # a Composition for another composite kind

    @property
    def claims(self) -> Resource:
        return Resource(self.group, VERSION, "gadgets", "Gadget")

    @property
    def composites(self) -> Resource:
        return Resource(self.group, VERSION, "xgadgets", "XGadget", namespaced=False)

    def ref(self, name: str) -> dict[str, str]:
        return {"apiVersion": f"{self.group}/{VERSION}", "kind": "XGadget", "name": name}

    def claim(self, name: str, namespace: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": f"{self.group}/{VERSION}",
            "kind": "Gadget",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"size": "small", "compositionRef": {"name": self.composition}, **spec},
        }


def composition(name: str, group: str, kind: str, secret: str) -> dict[str, Any]:
    """Composes a ClusterRole and a fixed connection detail through the stack's function
    (test_crossplane.py says why)."""
    return {
        "apiVersion": f"{XP}/v1",
        "kind": "Composition",
        "metadata": {"name": name},
        "spec": {
            "compositeTypeRef": {"apiVersion": f"{group}/{VERSION}", "kind": kind},
            "writeConnectionSecretsToNamespace": "crossplane-system",
            "mode": "Pipeline",
            "pipeline": [clusterrole_step(connectionDetails={"values": {"password": secret}})],
        },
    }


@pytest.fixture(scope="module")
def gadgets(clusters: dict[str, client.ApiClient]) -> Iterator[Gadgets]:
    admin = Kube(clusters["control-plane"])
    group = f"g{uuid.uuid4().hex[:8]}.test.klutch.example"
    xrd = {
        "apiVersion": f"{XP}/v1",
        "kind": "CompositeResourceDefinition",
        "metadata": {"name": f"xgadgets.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": "XGadget", "plural": "xgadgets"},
            "claimNames": {"kind": "Gadget", "plural": "gadgets"},
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "referenceable": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "string"}},
                                    "required": ["size"],
                                }
                            },
                        }
                    },
                }
            ],
        },
    }
    compositions = [
        composition(f"gadgets-{group}", group, "XGadget", TENANT_SECRET),
        composition(f"platform-gadgets-{group}", group, "XGadget", PLATFORM_SECRET),
        composition(f"other-{group}", group, "XOther", TENANT_SECRET),
    ]
    admin.apply(XRDS, xrd)
    for item in compositions:
        admin.apply(COMPOSITIONS, item)
    try:
        eventually(
            lambda: (
                conditions(admin.get(XRDS, None, xrd["metadata"]["name"]))
                == {"Established": "True", "Offered": "True"}
            ),
            "Crossplane to establish and offer the XRD",
            timeout=SETTLE,
        )
        claim_crd = eventually(
            lambda: admin.get(CRDS, None, f"gadgets.{group}"), "the claim CRD", timeout=SETTLE
        )
        yield Gadgets(group, claim_crd, *(c["metadata"]["name"] for c in compositions))
    finally:
        for item in compositions:
            admin.delete(COMPOSITIONS, None, item["metadata"]["name"])
        admin.delete(XRDS, None, xrd["metadata"]["name"])
        eventually(  # Crossplane deletes the claims and composites, then lets the XRD go
            lambda: admin.get(XRDS, None, xrd["metadata"]["name"]) is None,
            "Crossplane to remove the XRD's CRDs",
            timeout=180,
        )


def tenant_of(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    gadgets: Gadgets,
    directory: Path,
) -> Iterator[Tenant]:
    tenant = make_tenant(stack, clusters, directory, claim_crds=[gadgets.claim_crd])
    eventually(
        lambda: tenant.control_plane.get(NAMESPACES, None, tenant.mapped),
        "the tenant's mapped namespace",
    )
    yield tenant
    tenant.reconciler.stop()


@pytest.fixture(scope="module")
def victim(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    gadgets: Gadgets,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Tenant]:
    yield from tenant_of(stack, clusters, gadgets, tmp_path_factory.mktemp("victim"))


@pytest.fixture(scope="module")
def attacker(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    gadgets: Gadgets,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Tenant]:
    yield from tenant_of(stack, clusters, gadgets, tmp_path_factory.mktemp("attacker"))


def binder(tenant: Tenant) -> Kube:
    """The tenant's own Control Plane client: its binder kubeconfig, as the bind API issued it."""
    return Kube(api_client(tenant.config.repositories[0].control_plane_kubeconfig.file))


def bound(kube: Kube, gadgets: Gadgets, namespace: str, name: str) -> str | None:
    """The composite Crossplane bound the claim to, once the claim is Ready."""
    claim = kube.get(gadgets.claims, namespace, name) or {}
    if conditions(claim).get("Ready") != "True":
        return None
    return ((claim.get("spec") or {}).get("resourceRef") or {}).get("name")


def refused(call: Callable[[], object]) -> KubeError:
    with pytest.raises(KubeError) as caught:
        call()
    return caught.value


@dataclass(frozen=True)
class Victims:
    tenant_claim: str  # the victim tenant's claim (from Git) in its mapped namespace
    tenant_composite: str
    platform_composite: str  # a composite the platform made, bound to no claim
    tenant_secret: dict[str, Any]
    platform_spec: dict[str, Any]


def snapshot(admin: Kube, gadgets: Gadgets, victim: Tenant, victims: Victims) -> tuple:
    """Everything an attack could change: both composites, the victim's claim and Secret."""
    composites = tuple(
        admin.get(gadgets.composites, None, name)["spec"]
        for name in (victims.tenant_composite, victims.platform_composite)
    )
    claim = admin.get(gadgets.claims, victim.mapped, victims.tenant_claim)["spec"]
    secret = admin.get(SECRETS, victim.mapped, "victim-conn")
    return composites, claim, secret["data"], secret["metadata"]["resourceVersion"]


@pytest.fixture(scope="module")
def victims(victim: Tenant, gadgets: Gadgets, clusters: dict[str, client.ApiClient]) -> Victims:
    """The victim tenant's claim pushed through Git and bound by Crossplane (so the tenants'
    own claims still bind under the policy), and an unclaimed composite of the platform's."""
    admin = Kube(clusters["control-plane"])
    claim = gadgets.claim(
        "orders", victim.namespace, writeConnectionSecretToRef={"name": "victim-conn"}
    )
    victim.push({"claims/orders.yaml": yaml.safe_dump(claim)}, "the victim's gadget")
    composite = eventually(
        lambda: bound(admin, gadgets, victim.mapped, "orders"),
        "Crossplane to bind and compose the victim's claim from Git",
        timeout=SETTLE,
    )
    xr = admin.get(gadgets.composites, None, composite)
    assert xr["spec"]["claimRef"]["namespace"] == victim.mapped
    secret = eventually(
        lambda: admin.get(SECRETS, victim.mapped, "victim-conn"), "the victim's connection Secret"
    )
    assert base64.b64decode(secret["data"]["password"]).decode() == TENANT_SECRET

    platform = f"platform-shared-{uuid.uuid4().hex[:6]}"
    admin.apply(
        gadgets.composites,
        {
            "apiVersion": f"{gadgets.group}/{VERSION}",
            "kind": "XGadget",
            "metadata": {"name": platform},
            "spec": {
                "size": "platform",
                "compositionRef": {"name": gadgets.platform_composition},
                "writeConnectionSecretToRef": {"name": platform, "namespace": "crossplane-system"},
            },
        },
    )
    eventually(
        lambda: conditions(admin.get(gadgets.composites, None, platform)).get("Ready") == "True",
        "the platform's composite to be Ready",
        timeout=SETTLE,
    )
    return Victims(
        "orders",
        composite,
        platform,
        secret,
        admin.get(gadgets.composites, None, platform)["spec"],
    )


def test_binder_kubeconfig_cannot_name_a_composite(
    attacker: Tenant,
    victim: Tenant,
    victims: Victims,
    gadgets: Gadgets,
    clusters: dict[str, client.ApiClient],
) -> None:
    """The platform's unclaimed composite (taken over, its Secret leaked, deleted with the claim
    without the policy), the victim's composite, and a name of the attacker's choosing."""
    admin, tenant = Kube(clusters["control-plane"]), binder(attacker)
    before = snapshot(admin, gadgets, victim, victims)
    targets = {
        "take-platform": victims.platform_composite,
        "take-tenant": victims.tenant_composite,
        "squat": f"chosen-{uuid.uuid4().hex[:6]}",
    }
    for name, target in targets.items():
        claim = gadgets.claim(
            name,
            attacker.mapped,
            resourceRef=gadgets.ref(target),
            writeConnectionSecretToRef={"name": "loot"},
        )
        error = refused(lambda claim=claim: tenant.create(gadgets.claims, claim))
        assert (error.status, error.reason) == (403, "Forbidden")
        assert (
            error.message
            == f'gadgets.{gadgets.group} "{name}" is forbidden: {POLICY}{REFUSED_CREATE}'
        )
        # Server-side apply, as the reconciler and Klutch's konnector write, is refused alike.
        error = refused(lambda claim=claim: tenant.apply(gadgets.claims, claim))
        assert (error.status, REFUSED_CREATE in error.message) == (403, True)
        assert admin.get(gadgets.claims, attacker.mapped, name) is None
    assert admin.get(gadgets.composites, None, targets["squat"]) is None
    assert admin.get(SECRETS, attacker.mapped, "loot") is None
    assert snapshot(admin, gadgets, victim, victims) == before


def test_git_cannot_name_a_composite_or_pin_a_revision_or_a_secret_store(
    attacker: Tenant,
    victim: Tenant,
    victims: Victims,
    gadgets: Gadgets,
    clusters: dict[str, client.ApiClient],
) -> None:
    """Each refused in .klutch/reconcile.yaml with file, document, field and fix; the good claim
    beside them is applied and bound."""
    admin = Kube(clusters["control-plane"])
    before = snapshot(admin, gadgets, victim, victims)
    ns = attacker.namespace
    attacks = [
        ("take-platform", "resourceRef", gadgets.ref(victims.platform_composite)),
        ("take-tenant", "resourceRef", gadgets.ref(victims.tenant_composite)),
        ("pin", "compositionRevisionRef", {"name": f"{gadgets.composition}-0000000"}),
        ("pick", "compositionRevisionSelector", {"matchLabels": {"channel": "old"}}),
        ("store", "publishConnectionDetailsTo", {"name": "x", "configRef": {"name": "vault"}}),
    ]
    documents = [gadgets.claim("good", ns)] + [
        gadgets.claim(name, ns, **{field: value}) for name, field, value in attacks
    ]
    attacker.push(
        {"claims/gadgets.yaml": yaml.safe_dump_all(documents)}, "gadgets, some reaching out"
    )

    def report() -> dict[str, Any] | None:
        try:
            text = attacker.remote_file("claims/.klutch/reconcile.yaml")
        except Exception:  # not written yet
            return None
        loaded = yaml.safe_load(text)["registrations"][attacker.spec.name]
        found = {(r["document"], r["field"]) for r in loaded["rejections"]}
        return loaded if len(found) == len(attacks) else None

    rejections = eventually(report, "the refusals in reconcile.yaml", timeout=SETTLE)["rejections"]
    # Crossplane 2's claims have no publishConnectionDetailsTo at all: their schema refuses it
    # as an unknown field beside our rule, so a field may be refused twice
    assert sorted({(r["file"], r["document"], r["field"]) for r in rejections}) == [
        ("claims/gadgets.yaml", index, f"spec.{field}")
        for index, (_, field, _) in enumerate(attacks, start=1)
    ]
    by_field = {r["field"]: r for r in rejections if r["fix"].startswith("Remove")}
    assert by_field["spec.resourceRef"]["fix"].startswith("Remove spec.resourceRef;")
    assert "another tenant's or the platform's" in by_field["spec.resourceRef"]["message"]
    assert by_field["spec.publishConnectionDetailsTo"]["fix"].startswith(
        "Remove spec.publishConnectionDetailsTo;"
    )
    eventually(
        lambda: bound(admin, gadgets, attacker.mapped, "good"),
        "the good claim beside them to be bound",
        timeout=SETTLE,
    )
    for name, _, _ in attacks:
        assert admin.get(gadgets.claims, attacker.mapped, name) is None
    assert snapshot(admin, gadgets, victim, victims) == before


def test_a_bound_claims_composite_cannot_be_changed_or_dropped(
    attacker: Tenant,
    victim: Tenant,
    victims: Victims,
    gadgets: Gadgets,
    clusters: dict[str, client.ApiClient],
) -> None:
    """Re-pointing a bound claim would take the platform's composite; dropping the reference
    would leave the first composite running, bound to nobody. An ordinary change still goes."""
    admin, tenant = Kube(clusters["control-plane"]), binder(attacker)
    tenant.create(gadgets.claims, gadgets.claim("mine", attacker.mapped))
    mine = eventually(
        lambda: bound(admin, gadgets, attacker.mapped, "mine"),
        "Crossplane to bind the claim made with the binder kubeconfig",
        timeout=SETTLE,
    )
    before = snapshot(admin, gadgets, victim, victims)
    for patch in (
        {"spec": {"resourceRef": gadgets.ref(victims.platform_composite)}},
        {"spec": {"resourceRef": None}},
    ):
        error = refused(
            lambda patch=patch: tenant.patch(gadgets.claims, attacker.mapped, "mine", patch)
        )
        assert (error.status, error.reason) == (403, "Forbidden")
        assert (
            error.message
            == f'gadgets.{gadgets.group} "mine" is forbidden: {POLICY}{REFUSED_CHANGE}'
        )
    tenant.patch(gadgets.claims, attacker.mapped, "mine", {"spec": {"size": "large"}})
    eventually(
        lambda: admin.get(gadgets.composites, None, mine)["spec"]["size"] == "large",
        "the ordinary change to reach the claim's own composite",
    )
    owned, _ = admin.list(
        gadgets.composites,
        label_selector=f"crossplane.io/claim-namespace={attacker.mapped},crossplane.io/claim-name=mine",
    )
    assert [xr["metadata"]["name"] for xr in owned] == [mine]
    assert admin.get(gadgets.claims, attacker.mapped, "mine")["spec"]["resourceRef"]["name"] == mine
    assert snapshot(admin, gadgets, victim, victims) == before


def spec_fields(gadgets: Gadgets) -> set[str]:
    """The spec fields the claim CRD Crossplane generated declares."""
    schema = gadgets.claim_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return set(schema["properties"]["spec"]["properties"])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        (
            "compositionRevisionRef",
            {"name": "pinned-0000000"},
            "spec.compositionRevisionRef may not be set or changed: the platform team rolls out "
            "Composition revisions and Crossplane records the one in use. Remove "
            "spec.compositionRevisionRef; choose the backend with spec.compositionRef.name.",
        ),
        (
            "compositionRevisionSelector",
            {"matchLabels": {"channel": "old"}},
            "spec.compositionRevisionSelector may not be set or changed: the platform team rolls "
            "out Composition revisions. Remove spec.compositionRevisionSelector; choose the "
            "backend with spec.compositionRef.name.",
        ),
        (
            "publishConnectionDetailsTo",
            {"name": "orders", "configRef": {"name": "vault"}},
            "spec.publishConnectionDetailsTo may not be set or changed: it names one of the "
            "platform's secret stores, and a claim's credentials go only to its own namespace. "
            "Remove spec.publishConnectionDetailsTo; use spec.writeConnectionSecretToRef.name.",
        ),
    ],
)
def test_binder_kubeconfig_cannot_pin_a_revision_or_name_a_secret_store(
    attacker: Tenant,
    gadgets: Gadgets,
    clusters: dict[str, client.ApiClient],
    field: str,
    value: Any,
    message: str,
) -> None:
    admin, tenant = Kube(clusters["control-plane"]), binder(attacker)
    name = f"{field.lower()[:20]}-{uuid.uuid4().hex[:4]}"
    claim = gadgets.claim(name, attacker.mapped, **{field: value})
    if field not in spec_fields(gadgets):
        # Crossplane 2's claims have no secret stores: the field is pruned, nothing is named
        tenant.create(gadgets.claims, claim)
        assert field not in admin.get(gadgets.claims, attacker.mapped, name)["spec"]
        tenant.delete(gadgets.claims, attacker.mapped, name)
        return
    error = refused(lambda: tenant.create(gadgets.claims, claim))
    assert (error.status, error.message) == (
        403,
        f'gadgets.{gadgets.group} "{name}" is forbidden: {POLICY}{message}',
    )
    assert admin.get(gadgets.claims, attacker.mapped, name) is None
    # Added to a claim that exists: refused alike, and the claim keeps its spec.
    plain = gadgets.claim(name, attacker.mapped)
    tenant.create(gadgets.claims, plain)
    error = refused(
        lambda: tenant.patch(gadgets.claims, attacker.mapped, name, {"spec": {field: value}})
    )
    assert (error.status, message in error.message) == (403, True)
    assert field not in admin.get(gadgets.claims, attacker.mapped, name)["spec"]
    tenant.delete(gadgets.claims, attacker.mapped, name)


def test_a_composition_of_another_kind_composes_nothing(
    attacker: Tenant, gadgets: Gadgets, clusters: dict[str, client.ApiClient]
) -> None:
    """compositionRef stays the tenant's choice of backend; Crossplane takes only a Composition
    of the claim's own composite kind (composite/api.go: errCompositionNotCompatible)."""
    admin, tenant = Kube(clusters["control-plane"]), binder(attacker)
    claim = gadgets.claim("elsewhere", attacker.mapped, compositionRef={"name": gadgets.other_kind})
    tenant.create(gadgets.claims, claim)
    composite = eventually(
        lambda: (
            admin.get(gadgets.claims, attacker.mapped, "elsewhere")["spec"].get("resourceRef") or {}
        ).get("name"),
        "Crossplane to create the claim's composite",
        timeout=SETTLE,
    )

    def refusal() -> str | None:
        xr = admin.get(gadgets.composites, None, composite) or {}
        synced = [
            c for c in (xr.get("status") or {}).get("conditions", []) if c["type"] == "Synced"
        ]
        return synced[0].get("message") if synced and synced[0]["status"] == "False" else None

    message = eventually(refusal, "Crossplane to refuse the Composition", timeout=SETTLE)
    assert "referenced composition is not compatible with this composite resource" in message
    assert not admin.get(gadgets.composites, None, composite)["spec"].get("resourceRefs")
    assert (
        conditions(admin.get(gadgets.claims, attacker.mapped, "elsewhere")).get("Ready") != "True"
    )
    tenant.delete(gadgets.claims, attacker.mapped, "elsewhere")


def test_a_connection_secret_stays_in_the_claims_namespace(
    attacker: Tenant,
    victim: Tenant,
    victims: Victims,
    gadgets: Gadgets,
    clusters: dict[str, client.ApiClient],
) -> None:
    """A claim's writeConnectionSecretToRef holds a name only: a namespace naming the victim's
    is not part of the claim's schema and is dropped, the Secret lands in the claim's own."""
    admin, tenant = Kube(clusters["control-plane"]), binder(attacker)
    before = snapshot(admin, gadgets, victim, victims)
    ref = {"name": "victim-conn", "namespace": victim.mapped}
    tenant.create(
        gadgets.claims, gadgets.claim("conn", attacker.mapped, writeConnectionSecretToRef=ref)
    )
    assert admin.get(gadgets.claims, attacker.mapped, "conn")["spec"][
        "writeConnectionSecretToRef"
    ] == {"name": "victim-conn"}
    eventually(
        lambda: bound(admin, gadgets, attacker.mapped, "conn"), "the claim bound", timeout=SETTLE
    )
    own = eventually(
        lambda: admin.get(SECRETS, attacker.mapped, "victim-conn"),
        "the Secret in its own namespace",
    )
    assert base64.b64decode(own["data"]["password"]).decode() == TENANT_SECRET
    assert snapshot(admin, gadgets, victim, victims) == before
    tenant.delete(gadgets.claims, attacker.mapped, "conn")
