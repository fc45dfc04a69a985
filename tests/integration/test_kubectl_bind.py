"""Klutch's own ``kubectl bind URL`` against the bind API, call for call.

Klutch's binaries are on no package registry, so this test does on the wire and on the clusters
exactly what kubectl-bind does, read in anynines/klutchio (bind/pkg/kubectl):

- bind/plugin/authenticate.go ``getProvider``: ``GET /export``, then ``validateProviderVersion``
  (empty or below v0.3.0 refused; ``v0.0.0`` accepted as a development build);
- bind/plugin/bind.go ``Run``: ``provider.APIVersion`` must equal ``v1alpha1``; namespace
  ``klutch-bind`` got or created on the App Cluster; ``ClusterID`` = base62(SHA-224(its UID))[:6],
  ``SessionID`` = base62 of 28 random bytes [:6];
- bind/plugin/authenticate.go ``authenticate``: the OAuth2CodeGrant URL with ``p`` (the loopback
  port), ``s`` and ``c``; bind/authenticator/authenticator.go: a listener on ``localhost:0`` whose
  ``/callback`` decodes ``response`` with standard base64 into a BindingResponse;
- bind.go: the response must be ``klutch.anynines.com/v1alpha1`` BindingResponse with the session
  ID, each request ``klutch.anynines.com/v1alpha1``; base/kubeconfig.go ``ParseRemoteKubeconfig``,
  ``FindRemoteKubeconfig`` and ``EnsureKubeconfigSecret`` (``kubeconfig-`` generateName in
  ``klutch-bind``, or an update of the Secret of the same host and namespace);
- bind-apiservice/plugin/bind.go, serviceexportrequest.go: each request created in the remote
  kubeconfig's namespace WITH THE BINDER KUBECONFIG (on AlreadyExists again with generateName
  ``<name>-``), polled every second until ``Succeeded`` or ``Failed`` (terminalMessage);
- bind-apiservice/plugin/secret.go and servicebindings.go ``createAPIServiceBindings``: the
  kubeconfig Secret found again, an APIServiceBinding ``<resource>.<group>`` got, else created at
  the cluster path (the typed client is ``+genclient:nonNamespaced``: apiservicebinding_types.go,
  ``scope=Cluster``, as our CRD) with the body's ``namespace: klutch-bind`` the apiserver drops,
  ``kubeconfigSecretRef`` {klutch-bind, the Secret, kubeconfig} and the permission claims
  accepted, then its status ``Ready=False`` with severity ``Info`` and reason ``Pending``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlencode

import httpx
import pytest
import yaml

from bind_api.bindings import unbind
from bind_api.server import serve_in_background
from klutch_gitops.apis import API_SERVICE_BINDINGS, API_SERVICE_EXPORTS, EXPORT_REQUESTS
from klutch_gitops.consumer import recorded_groups
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.exports import FAILED, SUCCEEDED
from klutch_gitops.kube.client import Kube, KubeError, api_client
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from reconciler.controllers.export_requests import ExportRequestController
from tests.kit.wait import eventually

from .bindapi import browser_config, dev_id_token, healthy, offer, withdraw
from .dexflows import browser
from .test_bind_browser import BindApi, CliCallback, choices, log_in

POSTGRES = "postgresqlinstances.anynines.com"
BINDINGS = "servicebindings.anynines.com"
BACKUPS = "backups.anynines.com"  # offered to dbas-only, which the dev user is not in
KLUTCH_BIND = "klutch-bind"
BASE62 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@pytest.fixture(scope="module")
def bind_api(stack: StackInfo, clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The bind API with its browser flow, and the reconciler's export request controller."""
    admin = Kube(clusters["control-plane"])
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    install_crds(clusters["app"], load_crds(cluster="app"))
    namespace = offer(
        admin,
        "a-kubectl",
        {"postgresqlinstances": "team-a", "servicebindings": "team-a", "backups": "dbas-only"},
    )
    secret_dir = tmp_path_factory.mktemp("kubectl-bind-secrets")
    url = f"http://127.0.0.1:{stack.bind_api_port}"
    server = serve_in_background(browser_config(stack, secret_dir))
    controller = ExportRequestController(admin).start()  # as the leading reconciler runs it
    eventually(lambda: healthy(url), "the bind API to listen")
    yield BindApi(url, admin)
    controller.stop()
    server.should_exit = True
    withdraw(admin, namespace)


# -- kubectl-bind, step by step ---------------------------------------------------------------


def base62(data: bytes) -> str:
    """Go's ``big.Int.Text(62)`` of the bytes (bind.go ``toBase62``)."""
    number, digits = int.from_bytes(data, "big"), ""
    while number:
        number, digit = divmod(number, 62)
        digits = BASE62[digit] + digits
    return digits or "0"


def validate_provider_version(version: str) -> None:
    """authenticate.go ``validateProviderVersion``, for the semver forms a provider sends."""
    assert version, "provider version is empty, please update the backend to v0.3.0+"
    if version in ("v0.0.0", "v0.0.0-master+$Format:%H$"):
        return
    core = version.removeprefix("v").split("-", 1)[0].split("+", 1)[0]
    parts = tuple(int(p) for p in core.split("."))
    assert len(parts) == 3, f"provider version {version!r} cannot be parsed"
    assert parts >= (0, 3, 0), f"provider version {version} is not supported, must be >= v0.3.0"


def parse_remote_kubeconfig(kubeconfig: bytes | str) -> tuple[str, str]:
    """base/kubeconfig.go ``ParseRemoteKubeconfig``: the current context's server and namespace."""
    config = yaml.safe_load(kubeconfig)
    context = next(c for c in config["contexts"] if c["name"] == config["current-context"])[
        "context"
    ]
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])["cluster"]
    return cluster["server"], context.get("namespace", "")


def find_remote_kubeconfig(app: Kube, remote_namespace: str, remote_host: str) -> str:
    """base/kubeconfig.go ``FindRemoteKubeconfig``: a klutch-bind Secret of that host and ns."""
    for item in app.list(SECRETS, KLUTCH_BIND)[0]:
        data = (item.get("data") or {}).get("kubeconfig")
        if data and parse_remote_kubeconfig(base64.b64decode(data)) == (
            remote_host,
            remote_namespace,
        ):
            return item["metadata"]["name"]
    return ""


def ensure_kubeconfig_secret(app: Kube, kubeconfig: str, name: str) -> dict[str, Any]:
    """base/kubeconfig.go ``EnsureKubeconfigSecret``: create ``kubeconfig-*`` or update it."""
    data = {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()}
    if not name:
        return app.create(
            SECRETS,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"namespace": KLUTCH_BIND, "generateName": "kubeconfig-"},
                "data": data,
            },
        )
    live = app.get(SECRETS, KLUTCH_BIND, name)
    assert live is not None
    existing = parse_remote_kubeconfig(base64.b64decode(live["data"]["kubeconfig"]))
    assert existing == parse_remote_kubeconfig(kubeconfig), (
        "AlreadyExists in EnsureKubeconfigSecret"
    )
    live["data"] = {**live["data"], **data}
    return app.replace(SECRETS, live)


def create_export_request(
    remote: Kube, namespace: str, request: dict[str, Any], timeout: float = 120.0
) -> dict[str, Any]:
    """serviceexportrequest.go ``createServiceExportRequest``: create, then poll the phase."""
    body = {**request, "metadata": {**request["metadata"], "namespace": namespace}}
    try:
        created = remote.create(EXPORT_REQUESTS, body)
    except KubeError as error:
        if error.status != 409:
            raise
        name = body["metadata"].pop("name")
        body["metadata"]["generateName"] = f"{name}-"
        created = remote.create(EXPORT_REQUESTS, body)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = remote.get(EXPORT_REQUESTS, namespace, created["metadata"]["name"])
        assert live is not None, "APIServiceExportRequest was deleted by the service provider"
        if (live.get("status") or {}).get("phase") in (SUCCEEDED, FAILED):
            return live
        time.sleep(1.0)
    raise AssertionError(f"APIServiceExportRequest {created['metadata']['name']} never finished")


def create_api_service_bindings(
    app: Kube, request: dict[str, Any], secret_name: str
) -> list[dict[str, Any]]:
    """servicebindings.go ``createAPIServiceBindings`` (every permission claim accepted)."""
    bindings = []
    for resource in request["spec"]["resources"]:
        name = f"{resource['resource']}.{resource['group']}"
        existing = app.get(API_SERVICE_BINDINGS, None, name)
        if existing is not None:
            ref = existing["spec"]["kubeconfigSecretRef"]
            assert (ref["namespace"], ref["name"]) == (KLUTCH_BIND, secret_name), (
                f"found existing APIServiceBinding {name} not from this service provider"
            )
            bindings.append(existing)
            continue
        created = app._call(  # Create at the cluster path, the body naming klutch-bind
            "POST",
            API_SERVICE_BINDINGS.path(),
            body={
                "apiVersion": API_SERVICE_BINDINGS.api_version,
                "kind": "APIServiceBinding",
                "metadata": {"name": name, "namespace": KLUTCH_BIND},
                "spec": {
                    "kubeconfigSecretRef": {
                        "name": secret_name,
                        "key": "kubeconfig",
                        "namespace": KLUTCH_BIND,
                    },
                    "permissionClaims": [
                        {**claim, "state": "Accepted"}
                        for claim in resource.get("permissionClaims") or []
                    ],
                },
            },
        )
        created["status"] = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "False",
                    "severity": "Info",
                    "reason": "Pending",
                    "message": "Pending",
                    "lastTransitionTime": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            ]
        }
        app._call(  # UpdateStatus: a PUT of the status subresource
            "PUT",
            API_SERVICE_BINDINGS.path(None, name, "status"),
            body=created,
        )
        bindings.append(created)
    return bindings


def bind_apiservice(app: Kube, secret_name: str, request: dict[str, Any]) -> dict[str, Any]:
    """``kubectl bind apiservice --remote-kubeconfig-namespace klutch-bind ... -f request``."""
    secret = app.get(SECRETS, KLUTCH_BIND, secret_name)
    assert secret is not None
    kubeconfig = base64.b64decode(secret["data"]["kubeconfig"]).decode()
    host, namespace = parse_remote_kubeconfig(kubeconfig)
    assert namespace, "remote namespace is required"
    assert request["apiVersion"] == "klutch.anynines.com/v1alpha1"
    assert request["kind"] == "APIServiceExportRequest"
    result = create_export_request(Kube(api_client(kubeconfig)), namespace, request)
    assert result["status"]["phase"] == SUCCEEDED, result["status"].get("terminalMessage")
    assert find_remote_kubeconfig(app, namespace, host) == secret_name  # secret.go
    create_api_service_bindings(app, result, secret_name)
    return result


def kubectl_bind(bind_api: BindApi, stack: StackInfo, app: Kube, api: str) -> dict[str, Any]:
    """``kubectl bind URL``, choosing ``api`` in the browser; returns what it bound."""
    provider = httpx.get(f"{bind_api.url}/export").json()
    validate_provider_version(provider["version"])
    assert provider["apiVersion"] == "v1alpha1", "unsupported binding provider version"
    namespace = app.get(NAMESPACES, None, KLUTCH_BIND) or app.create(
        NAMESPACES, {"metadata": {"name": KLUTCH_BIND}}
    )
    cluster_id = base62(hashlib.sha224(namespace["metadata"]["uid"].encode()).digest())[:6]
    session_id = base62(secrets.token_bytes(28))[:6]
    callback = CliCallback(host="localhost")
    try:
        (method,) = [
            m for m in provider["authenticationMethods"] if m["method"] == "OAuth2CodeGrant"
        ]
        query = urlencode({"p": callback.port, "s": session_id, "c": cluster_id})
        with browser(stack) as http:
            back = log_in(
                http, http.get(f"{method['oauth2CodeGrant']['authenticatedURL']}?{query}"), stack
            )
            resources = http.get(back.headers["location"], follow_redirects=True)
            csrf, bindable = choices(resources)
            assert api in bindable, bindable
            done = http.post(f"{bind_api.url}/bind", data={"csrf": csrf, "api": [api]})
            assert done.status_code == 303, done.text
            assert done.headers["location"].startswith(f"http://localhost:{callback.port}/")
            assert http.get(done.headers["location"]).status_code == 200
        (received,) = callback.queries
    finally:
        callback.close()
    response = json.loads(base64.b64decode(parse_qs(received)["response"][0], validate=True))
    assert (response["apiVersion"], response["kind"]) == (
        "klutch.anynines.com/v1alpha1",
        "BindingResponse",
    )
    assert response["authentication"]["oauth2CodeGrant"]["sid"] == session_id
    assert all(r["apiVersion"] == "klutch.anynines.com/v1alpha1" for r in response["requests"])
    kubeconfig = base64.b64decode(response["kubeconfig"]).decode()  # Go's []byte in JSON
    host, remote_namespace = parse_remote_kubeconfig(kubeconfig)
    name = find_remote_kubeconfig(app, remote_namespace, host)
    secret = ensure_kubeconfig_secret(app, kubeconfig, name)
    results = [bind_apiservice(app, secret["metadata"]["name"], r) for r in response["requests"]]
    return {
        "consumer": remote_namespace,
        "secret": secret["metadata"]["name"],
        "kubeconfig": kubeconfig,
        "requests": results,
    }


def export_request(api: str) -> dict[str, Any]:
    """An APIServiceExportRequest for one API, as a person hands ``kubectl bind apiservice``."""
    resource, group = api.split(".", 1)
    return {
        "apiVersion": "klutch.anynines.com/v1alpha1",
        "kind": "APIServiceExportRequest",
        "metadata": {"name": api},
        "spec": {"resources": [{"group": group, "resource": resource, "versions": []}]},
    }


# -- the tests --------------------------------------------------------------------------------


@pytest.fixture
def app(clusters) -> Iterator[Kube]:
    """The App Cluster; the APIServiceBindings and klutch-bind Secrets the test's binds add are
    removed afterwards."""
    app = Kube(clusters["app"])

    def present() -> set[tuple[str, str]]:
        secrets = (
            app.list(SECRETS, KLUTCH_BIND)[0] if app.get(NAMESPACES, None, KLUTCH_BIND) else []
        )
        return {
            (API_SERVICE_BINDINGS.plural, item["metadata"]["name"])
            for item in app.list(API_SERVICE_BINDINGS)[0]
        } | {(SECRETS.plural, item["metadata"]["name"]) for item in secrets}

    before = present()
    yield app
    kinds = {r.plural: r for r in (API_SERVICE_BINDINGS, SECRETS)}
    for plural, name in present() - before:
        # a binding's namespace is ignored; Orphan keeps an App CRD a reconciler may have given
        # it as owner (deleting it would delete every App claim of that kind)
        app.delete(kinds[plural], KLUTCH_BIND, name, propagation="Orphan")
    # an orphaning deletion waits for the garbage collector: the next test must not find them
    eventually(lambda: not (present() - before), "the test's bindings and Secrets to go")


def test_kubectl_bind_binds_two_apis_one_after_the_other(
    bind_api: BindApi, stack: StackInfo, app: Kube
) -> None:
    first = kubectl_bind(bind_api, stack, app, POSTGRES)
    try:
        second = kubectl_bind(bind_api, stack, app, BINDINGS)
        consumer = first["consumer"]
        assert second["consumer"] == consumer  # same person, same App Cluster
        assert second["secret"] == first["secret"]  # found again and updated

        # The Control Plane: each CLI-created request (a generated name beside the bind API's
        # own) Succeeded, and both exports exist.
        requests = {r["metadata"]["name"]: r for r in first["requests"] + second["requests"]}
        assert all(name.startswith((f"{POSTGRES}-", f"{BINDINGS}-")) for name in requests)
        for name in requests:
            live = bind_api.admin.get(EXPORT_REQUESTS, consumer, name)
            assert live["status"]["phase"] == SUCCEEDED
        exports = {
            e["metadata"]["name"] for e in bind_api.admin.list(API_SERVICE_EXPORTS, consumer)[0]
        }
        assert {POSTGRES, BINDINGS} <= exports

        # The App Cluster: one kubeconfig Secret for this consumer and two APIServiceBindings.
        secret = app.get(SECRETS, KLUTCH_BIND, first["secret"])
        stored = base64.b64decode(secret["data"]["kubeconfig"]).decode()
        assert parse_remote_kubeconfig(stored) == parse_remote_kubeconfig(first["kubeconfig"])
        bindings = {
            b["metadata"]["name"]: b
            for b in app.list(API_SERVICE_BINDINGS)[0]  # the cluster path, as Klutch's
            if b["metadata"]["name"] in (POSTGRES, BINDINGS)
        }
        assert set(bindings) == {POSTGRES, BINDINGS}
        for binding in bindings.values():
            assert "namespace" not in binding["metadata"]  # cluster-scoped
            assert binding["spec"]["kubeconfigSecretRef"] == {
                "name": first["secret"],
                "key": "kubeconfig",
                "namespace": KLUTCH_BIND,
            }
            assert [c["state"] for c in binding["spec"]["permissionClaims"]] == ["Accepted"]
            [ready] = binding["status"]["conditions"]
            assert (ready["severity"], ready["reason"]) == ("Info", "Pending")  # kept, not pruned
    finally:
        unbind(bind_api.admin, first["consumer"])


def test_a_cli_request_for_an_api_the_groups_do_not_allow_fails(
    bind_api: BindApi, stack: StackInfo, app: Kube
) -> None:
    bound = kubectl_bind(bind_api, stack, app, POSTGRES)
    consumer = bound["consumer"]
    try:
        remote = Kube(api_client(bound["kubeconfig"]))

        refused = create_export_request(remote, consumer, export_request(BACKUPS))
        assert refused["status"]["phase"] == FAILED
        assert "only members of dbas-only may bind it" in refused["status"]["terminalMessage"]
        unknown = create_export_request(remote, consumer, export_request("widgets.example.com"))
        assert unknown["status"]["phase"] == FAILED
        assert "no APIServiceExportTemplate offers it" in unknown["status"]["terminalMessage"]
        exports = {
            e["metadata"]["name"] for e in bind_api.admin.list(API_SERVICE_EXPORTS, consumer)[0]
        }
        assert exports == {POSTGRES}
    finally:
        unbind(bind_api.admin, consumer)


def test_a_json_api_binding_records_the_groups_cli_requests_are_checked_against(
    bind_api: BindApi, stack: StackInfo
) -> None:
    """``POST /api/v1/bindings`` records the caller's OIDC groups on the consumer namespace as the
    browser flow does, so a request made later with the binder kubeconfig (serviceexportrequest.go)
    is answered, not failed for want of recorded groups."""
    bound = httpx.post(
        f"{bind_api.url}/api/v1/bindings",
        json={"clusterId": f"json{uuid.uuid4().hex[:6]}", "apis": [POSTGRES]},
        headers={"Authorization": f"Bearer {dev_id_token(stack)}"},
        timeout=180,
    )
    assert bound.status_code == 201, bound.text
    consumer = bound.json()["consumerNamespace"]
    try:
        recorded = recorded_groups(bind_api.admin.get(NAMESPACES, None, consumer))
        assert recorded is not None
        assert "team-a" in recorded[0]
        remote = Kube(api_client(bound.json()["kubeconfig"]))
        answered = create_export_request(remote, consumer, export_request(BINDINGS))
        assert answered["status"]["phase"] == SUCCEEDED, answered["status"].get("terminalMessage")
        exports = {
            e["metadata"]["name"] for e in bind_api.admin.list(API_SERVICE_EXPORTS, consumer)[0]
        }
        assert exports == {POSTGRES, BINDINGS}
    finally:
        unbind(bind_api.admin, consumer)
