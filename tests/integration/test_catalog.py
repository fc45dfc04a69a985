"""The catalog on the real Control Plane: Crossplane offers every XRD as a claim CRD, which takes
every example claim and refuses bad claims and bad changes with Klutch's messages.

Creates and changes are server-side dry runs; the changes are made to real claims, so that the
rules comparing with ``oldSelf`` run. No Composition is installed (the catalog's need function
servers), so Crossplane makes an XR for each real claim and composes nothing.

``catalogstack.catalog_offered`` installs the catalog and puts the stand-in claim CRDs back.
The session stack runs Crossplane 2; one test offers the same catalog on the other line's stack
(catalogstack ``other_line_stack``: 1.20, the line Klutch supports today).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from klutch_gitops.catalog import (
    PRODUCTION_BACKENDS,
    load_compositions,
    load_examples,
    load_templates,
    load_xrds,
)
from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.resources import CRDS, NAMESPACES

from .catalogstack import (
    OTHER_LINE,
    catalog_offered,
    clusters_for_line,
    conditions,
    other_line_stack,
)
from .test_clusters import eventually

pytestmark = pytest.mark.crossplane

GROUP = "anynines.com"
COMPOSITIONS = Resource("apiextensions.crossplane.io", "v1", "compositions", namespaced=False)
TEMPLATES = Resource("example-backend.klutch.anynines.com", "v1alpha1", "apiserviceexporttemplates")
PLURALS = {
    xrd["spec"]["claimNames"]["kind"]: xrd["spec"]["claimNames"]["plural"] for xrd in load_xrds()
}
EXAMPLES = load_examples()
A8S, A9S = {"name": "a8s-postgresql"}, {"name": "a9s-postgresql"}

SMALLER = "Transition from bigger to smaller plan size is not supported."
TO_SINGLE = "Migration from clustered to single Data Service Instance is not supported."
TO_CLUSTER = "Migration from single to clustered Data Service Instance is not supported."
SSL = "Plan migrations not possible from Non-SSL to SSL and SSL to Non-SSL"
BIONIC = "Plan migrations not possible from Non-Bionic to Bionic and Bionic to Non-Bionic"
IMMUTABLE = "Service is an immutable field"
TYPE = "Selected service instance type is not supported."


def claims(kind: str) -> Resource:
    return Resource(GROUP, "v1", PLURALS[kind], kind)


def claim(kind: str, name: str, spec: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def refusal(call: Callable[[], object]) -> str:
    """The API server's message for a request it refuses as invalid."""
    with pytest.raises(KubeError) as refused:
        call()
    assert refused.value.status == 422, refused.value
    return refused.value.message


@pytest.fixture(scope="module")
def control_plane(clusters: dict[str, client.ApiClient]) -> Iterator[Kube]:
    with catalog_offered(clusters) as admin:
        yield admin


@pytest.fixture(scope="module")
def claim_namespace(control_plane: Kube) -> Iterator[str]:
    name = f"catalog-{uuid.uuid4().hex[:6]}"
    control_plane.create(NAMESPACES, {"metadata": {"name": name}})
    yield name
    control_plane.delete(NAMESPACES, None, name)


def assert_offered(control_plane: Kube) -> None:
    """Every XRD's claim CRD, with the XRD's rules and Crossplane's fields, and its XR CRD."""
    for xrd in load_xrds():
        names = xrd["spec"]["claimNames"]
        crd = control_plane.get(CRDS, None, f"{names['plural']}.{GROUP}")
        assert crd is not None
        assert (crd["spec"]["scope"], crd["spec"]["names"]["kind"]) == ("Namespaced", names["kind"])
        assert conditions(crd)["Established"] == "True"
        (version,) = crd["spec"]["versions"]
        served = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        declared = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert served.get("x-kubernetes-validations") == declared.get("x-kubernetes-validations")
        assert set(declared["properties"]) < set(served["properties"])  # plus Crossplane's fields
        assert control_plane.get(CRDS, None, xrd["metadata"]["name"]) is not None  # the XR CRD


def test_every_xrd_is_offered_as_a_claim_crd_with_its_rules(control_plane: Kube) -> None:
    assert_offered(control_plane)


def test_the_catalog_is_offered_on_the_other_crossplane_line(
    request: pytest.FixtureRequest,
) -> None:
    """The same XRDs offered, and every Composition (the local pipelines too) accepted, by the
    other Crossplane line (1.20 by default)."""
    stack = other_line_stack(request)
    assert stack.crossplane == OTHER_LINE
    clusters = clusters_for_line(stack, request)
    with catalog_offered(clusters, backends=(*PRODUCTION_BACKENDS, "local")) as control_plane:
        assert_offered(control_plane)
        for composition in load_compositions((*PRODUCTION_BACKENDS, "local")):
            live = control_plane.get(COMPOSITIONS, None, composition["metadata"]["name"])
            assert live is not None
            assert live["spec"]["mode"] == composition["spec"]["mode"]


@pytest.mark.parametrize(
    "example", EXAMPLES, ids=[f"{e['kind']}/{e['metadata']['name']}" for e in EXAMPLES]
)
def test_example_claim_is_accepted(
    control_plane: Kube, claim_namespace: str, example: dict[str, Any]
) -> None:
    kind = example["kind"]
    body = claim(kind, example["metadata"]["name"], example["spec"], claim_namespace)
    created = control_plane.apply(claims(kind), body, dry_run=True)
    # the XRD's defaultCompositeDeletePolicy: Foreground on instances, as Klutch has it
    expected = "Foreground" if kind.endswith("Instance") else "Background"
    assert created["spec"].get("compositeDeletePolicy") == expected


INVALID = [
    (
        "PostgresqlInstance",
        {"service": "a9s-postgresql15", "plan": "postgresql-single-small"},
        "Unsupported service used for postgresql",
    ),
    (
        "PostgresqlInstance",
        {"service": "a9s-postgresql14", "plan": "postgresql-single-small", "compositionRef": A9S},
        "Unsupported service used for postgresql",
    ),
    (
        "PostgresqlInstance",
        {"service": "a9s-postgresql14", "plan": "postgresql-single-big-ssl", "compositionRef": A8S},
        "Unsupported plan used for postgresql",
    ),
    (
        "PostgresqlInstance",
        {"service": "a9s-postgresql15", "plan": "postgresql-single-medium", "compositionRef": A9S},
        "Unsupported plan used for postgresql",
    ),
    (
        "PostgresqlInstance",
        {"service": "a9s-postgresql13", "plan": "postgresql-single-small-bionic"},
        "Unsupported plan used for postgresql",
    ),
    (
        "PostgresqlInstance",
        {
            "service": "a9s-postgresql15",
            "plan": "postgresql-single-big-bionic",
            "compositionRef": A9S,
        },
        "Bionic plans are only supported by a9s PostgreSQL 13",
    ),
    (
        "PostgresqlInstance",
        {
            "service": "a9s-postgresql14",
            "plan": "postgresql-single-small",
            "parameters": {"workMem": "8MB"},
        },
        "parameters.workMem is not supported for a8s-postgresql",
    ),
    (
        "PostgresqlInstance",
        {
            "service": "a9s-postgresql15",
            "plan": "postgresql-single-small",
            "compositionRef": A9S,
            "parameters": {"maxLocksPerTransaction": 64},
        },
        "parameters.maxLocksPerTransaction is not supported for a9s-postgresql",
    ),
    (
        "PostgresqlInstance",
        {
            "service": "a9s-postgresql14",
            "plan": "postgresql-single-small",
            "parameters": {"tempFileLimit": 0},
        },
        "Must be either -1 (no limit) or a limit specified in kilobytes",
    ),
    ("PostgresqlInstance", {"service": "a9s-postgresql14"}, "spec.plan: Required value"),
    (
        "KeyvalueInstance",
        {
            "service": "a9s-keyvalue8",
            "plan": "keyvalue-single-small-ssl",
            "parameters": {"failoverTimeout": 1500},
        },
        "parameters.failoverTimeout is only supported for clustered plans",
    ),
    (
        "KeyvalueInstance",
        {"service": "a9s-keyvalue7", "plan": "keyvalue-single-small-ssl"},
        'spec.service: Unsupported value: "a9s-keyvalue7"',
    ),
    (
        "MariadbInstance",
        {"service": "a9s-mariadb1011", "plan": "mariadb-single-small"},
        "MariaDB v10.11 only supports ssl plans",
    ),
    (
        "MongodbInstance",
        {
            "service": "a9s-mongodb70",
            "plan": "mongodbsspl-single-small",
            "parameters": {
                "setClusterParameter": {
                    "changeStreamOptions": {"preAndPostImages": {"expireAfterSeconds": "never"}}
                }
            },
        },
        "must be 'off' or an integer >= 0",
    ),
    (
        "MessagingInstance",
        {
            "service": "a9s-messaging4",
            "plan": "messaging-single-small",
            "parameters": {"consumerTimeout": 60},
        },
        "should be greater than or equal to 1800000",
    ),
    (
        "SearchInstance",
        {"service": "a9s-search2", "plan": "search-single-small"},
        'spec.plan: Unsupported value: "search-single-small"',
    ),
    ("ServiceBinding", {"instanceRef": "docs", "serviceInstanceType": "mongodb"}, TYPE),
    ("ServiceBinding", {"serviceInstanceType": "postgresql"}, "spec.instanceRef: Required value"),
    (
        "Backup",
        {"instanceRef": "docs", "serviceInstanceType": "mongodb", "compositionRef": {"name": ""}},
        TYPE,
    ),
    (
        "Restore",
        {"backupRef": "nightly", "serviceInstanceType": "postgresql"},
        "restores without instance ref are not supported for a8s",
    ),
    (
        "Restore",
        {"instanceRef": "db", "serviceInstanceType": "postgresql"},
        "spec.backupRef: Required value",
    ),
]


@pytest.mark.parametrize(
    ("kind", "spec", "message"), INVALID, ids=[f"{k}-{m[:50]}" for k, _, m in INVALID]
)
def test_invalid_claim_is_refused_with_klutchs_message(
    control_plane: Kube, claim_namespace: str, kind: str, spec: dict[str, Any], message: str
) -> None:
    body = claim(kind, "invalid", spec, claim_namespace)
    assert message in refusal(lambda: control_plane.apply(claims(kind), body, dry_run=True))


# Claims Klutch's XRDs refuse and ours accept on purpose (catalog/README.md, "Where this differs
# from Klutch"): no compositionRef, a PostgreSQL composition of our own, a9s-postgresql17.
DELIBERATE = [
    ("PostgresqlInstance", {"service": "a9s-postgresql14", "plan": "postgresql-single-small"}),
    (
        "PostgresqlInstance",
        {
            "service": "a9s-postgresql14",
            "plan": "postgresql-replica-medium",
            "compositionRef": {"name": "local-postgresql"},
        },
    ),
    (
        "PostgresqlInstance",
        {"service": "a9s-postgresql17", "plan": "postgresql-single-small", "compositionRef": A9S},
    ),
    ("Backup", {"instanceRef": "db", "serviceInstanceType": "postgresql"}),
]


@pytest.mark.parametrize(
    ("kind", "spec"),
    DELIBERATE,
    ids=["no-compositionRef", "local-postgresql", "a9s-postgresql17", "backup-no-compositionRef"],
)
def test_claim_klutch_refuses_on_purpose_is_accepted(
    control_plane: Kube, claim_namespace: str, kind: str, spec: dict[str, Any]
) -> None:
    body = claim(kind, "deliberate", spec, claim_namespace)
    control_plane.apply(claims(kind), body, dry_run=True)


LIVE = {
    "a8s-db": (
        "PostgresqlInstance",
        {"service": "a9s-postgresql14", "plan": "postgresql-replica-medium"},
    ),
    "a9s-db": (
        "PostgresqlInstance",
        {"service": "a9s-postgresql13", "plan": "postgresql-single-small", "compositionRef": A9S},
    ),
    "cache": (
        "KeyvalueInstance",
        {"service": "a9s-keyvalue8", "plan": "keyvalue-single-small-ssl"},
    ),
    "metrics": (
        "PrometheusInstance",
        {"service": "a9s-prometheus", "plan": "prometheus-single-small"},
    ),
}


@pytest.fixture(scope="module")
def live(control_plane: Kube, claim_namespace: str) -> Iterator[None]:
    """Real claims to change; deleted (with the XRs Crossplane made for them) afterwards."""
    for name, (kind, spec) in LIVE.items():
        control_plane.apply(claims(kind), claim(kind, name, spec, claim_namespace))
    yield
    for name, (kind, _) in LIVE.items():
        control_plane.delete(claims(kind), claim_namespace, name)
    eventually(
        lambda: all(
            control_plane.get(claims(kind), claim_namespace, name) is None
            for name, (kind, _) in LIVE.items()
        ),
        "the real claims and their XRs to be deleted",
        timeout=120,
    )


TRANSITIONS = [
    ("a8s-db", {"plan": "postgresql-replica-small"}, SMALLER),
    ("a8s-db", {"plan": "postgresql-single-big"}, TO_SINGLE),
    ("a8s-db", {"service": "a9s-postgresql13"}, IMMUTABLE),
    ("a9s-db", {"plan": "postgresql-single-nano"}, SMALLER),
    ("a9s-db", {"plan": "postgresql-single-small-ssl"}, SSL),
    ("a9s-db", {"plan": "postgresql-single-small-bionic"}, BIONIC),
    ("a9s-db", {"service": "a9s-postgresql15"}, IMMUTABLE),
    ("cache", {"plan": "keyvalue-replica-small-ssl"}, TO_CLUSTER),
    ("cache", {"plan": "keyvalue-single-nano-ssl"}, SMALLER),
    ("metrics", {"plan": "prometheus-single-big"}, "Upgrade functionality for Prometheus plans"),
]


@pytest.mark.usefixtures("live")
@pytest.mark.parametrize(
    ("name", "change", "message"), TRANSITIONS, ids=[f"{n}-{c}" for n, c, _ in TRANSITIONS]
)
def test_refused_change_of_a_live_claim(
    control_plane: Kube, claim_namespace: str, name: str, change: dict[str, str], message: str
) -> None:
    kind, spec = LIVE[name]
    body = claim(kind, name, {**spec, **change}, claim_namespace)
    assert message in refusal(lambda: control_plane.apply(claims(kind), body, dry_run=True))


ALLOWED = [
    ("a8s-db", {"plan": "postgresql-replica-big"}),
    ("a9s-db", {"plan": "postgresql-replica-big", "parameters": {"workMem": "8MB"}}),
    ("cache", {"plan": "keyvalue-single-medium-ssl"}),
    ("metrics", {"parameters": {"mappingStrictMatch": False}}),
]


@pytest.mark.usefixtures("live")
@pytest.mark.parametrize(("name", "change"), ALLOWED, ids=[f"{n}-{c}" for n, c in ALLOWED])
def test_allowed_change_of_a_live_claim(
    control_plane: Kube, claim_namespace: str, name: str, change: dict[str, Any]
) -> None:
    kind, spec = LIVE[name]
    body = claim(kind, name, {**spec, **change}, claim_namespace)
    changed = control_plane.apply(claims(kind), body, dry_run=True)
    assert {key: changed["spec"][key] for key in change} == change
    live = control_plane.get(claims(kind), claim_namespace, name)
    assert live is not None
    assert {key: live["spec"].get(key) for key in change} == {k: spec.get(k) for k in change}


def test_compositions_and_templates_are_accepted_by_the_control_plane(
    clusters: dict[str, client.ApiClient], control_plane: Kube, claim_namespace: str
) -> None:
    for composition in load_compositions():
        control_plane.apply(COMPOSITIONS, composition, dry_run=True)
    install_crds(clusters["control-plane"], load_crds(cluster="control-plane"))
    for template in load_templates():  # into the test's namespace: the schema is what is checked
        body = {**template, "metadata": {**template["metadata"], "namespace": claim_namespace}}
        control_plane.apply(TEMPLATES, body, dry_run=True)
