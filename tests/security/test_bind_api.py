"""The bind API's JSON interface attacked with real Dex tokens, a real uvicorn and the real
Control Plane: consumer-namespace takeover, prefix ownership, hostile input, oversized and slow
requests, the per-identity limit, and what /metrics tells an unauthenticated caller.

Every refusal is checked for its status and message, and for what it must not have done: no
namespace, ServiceAccount, Secret or token created, no annotation changed.
"""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

import httpx
import pytest

from bind_api.bindings import BINDER_SECRET
from bind_api.server import build_server
from klutch_gitops.apis import BINDER, IDENTITY_ANNOTATION
from klutch_gitops.consumer import consumer_namespace, identity_of, legacy_consumer_namespace
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import NAMESPACES, SECRETS, SERVICE_ACCOUNTS
from klutch_gitops.oidc_client import unverified_claims
from klutch_gitops.serving import REQUEST_SECONDS
from tests.integration.bindapi import API, bind_api_config, dev_id_token, offered_api, serving
from tests.kit.wait import eventually


@dataclass(frozen=True)
class BindApi:
    url: str
    admin: Kube
    token: str
    subject: str

    def bind(self, cluster: str, **body: object) -> httpx.Response:
        return httpx.post(
            f"{self.url}/api/v1/bindings",
            headers=self.auth,
            json={"clusterId": cluster, "apis": [API], **body},
            timeout=60,
        )

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


@pytest.fixture(scope="module")
def api(stack: StackInfo, clusters) -> Iterator[BindApi]:
    token = dev_id_token(stack)
    with offered_api(clusters, "a-security"), serving(build_server(bind_api_config(stack))) as url:
        yield BindApi(url, Kube(clusters["control-plane"]), token, unverified_claims(token)["sub"])


@pytest.fixture
def cluster(api: BindApi) -> Iterator[str]:
    """A fresh cluster ID; whatever was bound for it is unbound afterwards."""
    name = f"sec-{uuid.uuid4().hex[:8]}"
    yield name
    for consumer in (
        consumer_namespace(api.subject, name),
        legacy_consumer_namespace(api.subject, name),
    ):
        api.admin.delete(NAMESPACES, None, consumer)


def namespace(admin: Kube, name: str, identity: str | None) -> dict:
    annotations = {IDENTITY_ANNOTATION: identity} if identity else {}
    return admin.create(
        NAMESPACES,
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": name, "annotations": annotations},
        },
    )


def nothing_bound_in(admin: Kube, name: str) -> None:
    """No binder ServiceAccount, no Secret, no consumer Role: the bind wrote nothing here."""
    assert admin.get(SERVICE_ACCOUNTS, name, BINDER) is None
    assert admin.list(SECRETS, name)[0] == []


def no_consumer_for(api: BindApi, cluster: str) -> None:
    for name in (
        consumer_namespace(api.subject, cluster),
        legacy_consumer_namespace(api.subject, cluster),
    ):
        assert api.admin.get(NAMESPACES, None, name) is None, name


# -- consumer namespaces ----------------------------------------------------------------------


def test_a_namespace_with_the_attackers_name_and_another_identity_is_never_taken_over(
    api: BindApi, cluster: str
) -> None:
    """Before: 40-bit names, force-applied, so a colliding bind rewrote the victim's identity
    annotation and got a binder kubeconfig for the victim's namespace. Here the victim's
    namespace is pre-created with exactly the name the attacker's bind computes."""
    target = consumer_namespace(api.subject, cluster)
    victim = identity_of("victim-subject", "victims-cluster")
    namespace(api.admin, target, victim)
    refused = api.bind(cluster)
    body = refused.json()
    assert refused.status_code == 409, body.get("consumerNamespace")  # never print its token
    assert body["error"] == (
        f"namespace {target} already exists on the Control Plane and does not belong to this "
        "identity; nothing was bound"
    )
    assert f"ask the platform team to look at namespace {target}" in body["fix"]
    assert "kubeconfig" not in body
    live = api.admin.get(NAMESPACES, None, target)
    assert live["metadata"]["annotations"][IDENTITY_ANNOTATION] == victim
    nothing_bound_in(api.admin, target)


def test_a_namespace_without_an_identity_is_not_adopted(api: BindApi, cluster: str) -> None:
    target = consumer_namespace(api.subject, cluster)
    namespace(api.admin, target, None)
    refused = api.bind(cluster)
    assert refused.status_code == 409
    assert "does not belong to this identity" in refused.json()["error"]
    assert IDENTITY_ANNOTATION not in (
        api.admin.get(NAMESPACES, None, target)["metadata"].get("annotations") or {}
    )
    nothing_bound_in(api.admin, target)


def test_a_consumer_under_the_old_name_keeps_it_and_others_cannot_use_it(
    api: BindApi, cluster: str
) -> None:
    """Existing users re-bind idempotently into their 10-hex-digit namespace; a legacy name
    holding someone else's identity is skipped, never taken."""
    legacy = legacy_consumer_namespace(api.subject, cluster)
    namespace(api.admin, legacy, identity_of(api.subject, cluster))
    again = api.bind(cluster)
    assert again.status_code == 201, again.text
    assert again.json()["consumerNamespace"] == legacy
    assert api.admin.get(NAMESPACES, None, consumer_namespace(api.subject, cluster)) is None

    other = f"{cluster}-x"
    taken = legacy_consumer_namespace(api.subject, other)
    namespace(api.admin, taken, identity_of("victim-subject", other))
    try:
        fresh = api.bind(other)
        assert fresh.status_code == 201, fresh.text
        assert fresh.json()["consumerNamespace"] == consumer_namespace(api.subject, other)
        assert api.admin.get(NAMESPACES, None, taken)["metadata"]["annotations"] == {
            IDENTITY_ANNOTATION: identity_of("victim-subject", other)
        }
        nothing_bound_in(api.admin, taken)
    finally:
        for name in (taken, consumer_namespace(api.subject, other)):
            api.admin.delete(NAMESPACES, None, name)


def test_ownership_is_the_exact_subject_not_a_prefix(api: BindApi, cluster: str) -> None:
    """Before: ``_owned`` matched ``<sub>#``, so the identity of a subject ``<sub>#evil`` was the
    caller's to list and delete."""
    other = f"cluster-{uuid.uuid4().hex[:12]}"
    namespace(api.admin, other, identity_of(f"{api.subject}#evil", cluster))
    try:
        listed = httpx.get(f"{api.url}/api/v1/bindings", headers=api.auth).json()["bindings"]
        assert other not in {b["consumerNamespace"] for b in listed}
        deleted = httpx.delete(f"{api.url}/api/v1/bindings/{other}", headers=api.auth)
        assert deleted.status_code == 404
        assert deleted.json()["detail"] == f"no binding {other} of yours"
        assert api.admin.get(NAMESPACES, None, other) is not None
    finally:
        api.admin.delete(NAMESPACES, None, other)


def test_a_new_consumer_name_carries_130_bits(api: BindApi, cluster: str) -> None:
    bound = api.bind(cluster)
    assert bound.status_code == 201, bound.text
    name = bound.json()["consumerNamespace"]
    assert name == consumer_namespace(api.subject, cluster)
    assert len(name.removeprefix("cluster-")) == 26


# -- hostile input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cluster_id", "message"),
    [
        ("app#1", "clusterId 'app#1' is not a cluster ID"),  # would split the identity
        ("app\n1", "clusterId 'app\\n1' is not a cluster ID"),
        ("-app", "clusterId '-app' is not a cluster ID"),
        ("a" * 254, "at most 253 characters"),
        ("", "at least 1 character"),
    ],
)
def test_a_bad_cluster_id_is_a_422_naming_it_before_anything_is_created(
    api: BindApi, cluster_id: str, message: str
) -> None:
    refused = api.bind(cluster_id)
    assert refused.status_code == 422, refused.text
    [problem] = refused.json()["detail"]
    assert problem["loc"] == ["body", "clusterId"]
    assert message in problem["msg"]
    if cluster_id:
        no_consumer_for(api, cluster_id)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["Team_A"], "'Team_A' is not a namespace name"),
        (["team-a", "x" * 64], "is not a namespace name"),
        (["team-a", "team-a"], "names a namespace twice"),
        ([f"ns-{i}" for i in range(65)], "at most 64 items"),
        (["../etc"], "is not a namespace name"),
    ],
)
def test_bad_app_namespaces_are_a_422_and_leave_no_orphan_secret(
    api: BindApi, cluster: str, names: list[str], message: str
) -> None:
    """Before: the App kubeconfig Secret was written, then the CRD refused the binding."""
    refused = api.bind(
        cluster,
        repository={"url": "https://git.example.com/team/claims.git", "appNamespaces": names},
        appKubeconfig="apiVersion: v1\nkind: Config\n",
    )
    assert refused.status_code == 422, refused.text
    problems = {tuple(p["loc"]): p["msg"] for p in refused.json()["detail"]}
    assert message in problems[("body", "repository", "appNamespaces")]
    no_consumer_for(api, cluster)


def test_a_body_over_a_mebibyte_is_a_413_before_it_is_parsed(api: BindApi, cluster: str) -> None:
    """Before: 12 MiB were parsed and re-sent to the apiserver three times."""
    padding = "x" * (1024 * 1024)
    refused = api.bind(cluster, appKubeconfig=padding)
    assert refused.status_code == 413
    assert refused.json() == {
        "error": f"the request body is larger than {1024 * 1024} bytes",
        "fix": f"send at most {1024 * 1024} bytes",
    }
    no_consumer_for(api, cluster)


def test_trickled_headers_are_cut_off(api: BindApi) -> None:
    """Slow loris: uvicorn alone keeps a connection that sends a header byte now and then."""
    host, _, port = api.url.removeprefix("http://").rpartition(":")
    started = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=REQUEST_SECONDS + 10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: bind\r\n")
        answer = b""
        try:
            while time.monotonic() - started < REQUEST_SECONDS + 8:
                sock.sendall(b"X-Slow: 1\r\n")
                time.sleep(1)
        except OSError:
            pass
        try:
            while part := sock.recv(4096):
                answer += part
        except OSError:
            pass
    assert time.monotonic() - started < REQUEST_SECONDS + 5
    assert answer.startswith(b"HTTP/1.1 408 "), answer


# -- limits and what is told --------------------------------------------------------------------


def test_the_binding_limit_per_identity_is_a_429_naming_limit_and_fix(
    api: BindApi, stack: StackInfo
) -> None:
    owned = httpx.get(f"{api.url}/api/v1/bindings", headers=api.auth).json()["bindings"]
    limit = len(owned) + 1
    first, second = f"lim-{uuid.uuid4().hex[:8]}", f"lim-{uuid.uuid4().hex[:8]}"
    config = replace(bind_api_config(stack), bindings_per_identity=limit)
    try:
        with serving(build_server(config)) as url:
            limited = replace(api, url=url)
            assert limited.bind(first).status_code == 201
            again = limited.bind(first)  # binding again is not a new binding
            assert again.status_code == 201
            over = limited.bind(second)
            assert over.status_code == 429, over.text
            assert over.json()["error"] == (
                f"this identity already has {limit} bindings, the limit is {limit}; "
                "nothing was bound"
            )
            assert "raise bindingsPerIdentity" in over.json()["fix"]
            no_consumer_for(api, second)
    finally:
        api.admin.delete(NAMESPACES, None, consumer_namespace(api.subject, first))


def test_metrics_name_no_tenant(api: BindApi, cluster: str) -> None:
    """/metrics is unauthenticated: it counts requests by operation and outcome, nothing else."""
    bound = api.bind(cluster)
    assert bound.status_code == 201
    text = httpx.get(f"{api.url}/metrics").text
    assert 'klutch_bind_requests_total{operation="bind",outcome="ok"}' in text
    consumer = bound.json()["consumerNamespace"]
    email = unverified_claims(api.token).get("email", "")
    for secret in (consumer, consumer.removeprefix("cluster-"), cluster, api.subject, email):
        assert secret not in text


def test_a_binding_hands_out_one_binder_secret(api: BindApi, cluster: str) -> None:
    """What the takeover tests rely on: a successful bind does write these."""
    bound = api.bind(cluster)
    assert bound.status_code == 201
    consumer = bound.json()["consumerNamespace"]
    eventually(lambda: api.admin.get(SECRETS, consumer, BINDER_SECRET), "the binder Secret")
    assert api.admin.get(SERVICE_ACCOUNTS, consumer, BINDER) is not None
