"""The bind API client's error mapping, the App Cluster builders, and the CLI's pure decisions."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import httpx
import pytest
import yaml

from klutch_gitops import bind_client
from klutch_gitops.bind_cli import (
    bearer_token,
    claims_for,
    confirmation_needed,
    write_gitops,
)
from klutch_gitops.bind_client import BindClient
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube import NAMESPACES, SECRETS

SECRETS_CLAIM = {
    "group": "",
    "resource": "secrets",
    "version": "v1",
    "selector": {"names": ["*"], "owner": "Provider"},
    "required": True,
}
API = "postgresqlinstances.anynines.com"


def client(handler) -> BindClient:
    return BindClient("https://bind.test/", "tok", transport=httpx.MockTransport(handler))


def test_requests_carry_the_bearer_token_and_read_the_answers() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/api/v1/exports":
            return httpx.Response(200, json={"exports": [{"api": API, "allowed": True}]})
        if request.method == "POST":
            return httpx.Response(
                201, json={"consumerNamespace": "cluster-x", **json.loads(request.content)}
            )
        if request.method == "DELETE":
            return httpx.Response(204)
        return httpx.Response(200, json={"bindings": [{"consumerNamespace": "cluster-x"}]})

    with client(handler) as api:
        assert api.exports()[0]["api"] == API
        assert api.bind({"clusterId": "c", "apis": [API]})["consumerNamespace"] == "cluster-x"
        assert api.bindings() == [{"consumerNamespace": "cluster-x"}]
        api.unbind("cluster-x")
    assert {r.headers["Authorization"] for r in seen} == {"Bearer tok"}
    assert [(r.method, r.url.path) for r in seen][-1] == ("DELETE", "/api/v1/bindings/cluster-x")


@pytest.mark.parametrize(
    ("status", "body", "message", "fix"),
    [
        (401, {"detail": "token expired"}, "not authenticated: token expired", "klutch-bind login"),
        (403, {"detail": "only members of dbas-only"}, "only members of dbas-only", "group"),
        (400, {"error": "no template offers x", "fix": "ask"}, "no template offers x", "ask"),
        (404, {"detail": "no binding c of yours"}, "no binding c of yours", "status"),
        (
            422,
            {"detail": [{"loc": ["body", "apis"], "msg": "too short"}]},
            "body.apis: too short",
            "options",
        ),
        (503, {"detail": "issuer down"}, "issuer down", "try again"),
        (500, None, "HTTP 500", "logs"),
    ],
)
def test_errors_carry_the_servers_explanation_and_a_fix(
    status: int, body: dict | None, message: str, fix: str
) -> None:
    def handler(_: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body) if body else httpx.Response(status, text="boom")

    with client(handler) as api, pytest.raises(KlutchError) as raised:
        api.bindings()
    assert raised.value.message == message
    assert fix in raised.value.fix


def test_an_unreachable_api_is_a_klutch_error() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with client(handler) as api, pytest.raises(KlutchError, match="cannot reach the bind API"):
        api.exports()


def test_app_objects_are_namespace_secret_and_accepted_bindings() -> None:
    objects = bind_client.app_objects("cluster-x", "kubeconfig: yes\n", {API: [SECRETS_CLAIM]})
    assert [(r, o["kind"]) for r, o in objects] == [
        (NAMESPACES, "Namespace"),
        (SECRETS, "Secret"),
        (bind_client.SERVICE_BINDINGS, "APIServiceBinding"),
    ]
    secret, binding = objects[1][1], objects[2][1]
    assert secret["metadata"] == {
        "name": "cluster-x-kubeconfig",
        "namespace": "klutch-bind",
        "labels": {bind_client.CONSUMER_LABEL: "cluster-x"},
    }
    assert base64.b64decode(secret["data"]["kubeconfig"]).decode() == "kubeconfig: yes\n"
    assert binding["metadata"]["name"] == API
    assert binding["metadata"]["namespace"] == "klutch-bind"
    assert binding["spec"]["kubeconfigSecretRef"] == {
        "namespace": "klutch-bind",
        "name": "cluster-x-kubeconfig",
        "key": "kubeconfig",
    }
    assert binding["spec"]["permissionClaims"] == [{**SECRETS_CLAIM, "state": "Accepted"}]


def test_accepted_claims_keep_only_the_schema_fields() -> None:
    assert bind_client.accepted_claims([{"resource": "secrets", "extra": 1}]) == [
        {"resource": "secrets", "state": "Accepted"}
    ]


def test_bindings_of_a_consumer_are_found_by_their_secret() -> None:
    items = [
        bind_client.service_binding("a.example.com", "cluster-x", []),
        bind_client.service_binding("b.example.com", "cluster-y", []),
        {"metadata": {"name": "c.example.com"}, "spec": {}},
    ]
    assert bind_client.bindings_of("cluster-x", items) == ["a.example.com"]


def test_describe_claim_says_what_the_provider_gets() -> None:
    assert bind_client.describe_claim(SECRETS_CLAIM) == (
        "secrets names [*] in all namespaces, owned by Provider (required)"
    )
    assert bind_client.describe_claim(
        {"group": "apps", "resource": "deployments", "selector": {"namespaces": ["a"]}}
    ) == ("deployments.apps names [*] in a, owned by Consumer")


def test_gitops_files_never_hold_the_secret(tmp_path: Path) -> None:
    files = bind_client.gitops_files("cluster-x", {API: [SECRETS_CLAIM]})
    written = write_gitops(tmp_path / "out", files)
    assert sorted(Path(p).name for p in written) == [
        "README.md",
        f"apiservicebinding-{API}.yaml",
        "namespace-klutch-bind.yaml",
    ]
    kinds = [yaml.safe_load(p.read_text())["kind"] for p in (tmp_path / "out").glob("*.yaml")]
    assert sorted(kinds) == ["APIServiceBinding", "Namespace"]
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "klutch-bind/cluster-x-kubeconfig" in readme
    assert "out of band" in readme


def test_confirmation_is_asked_on_a_terminal_and_needs_yes_without_one() -> None:
    assert confirmation_needed(yes=False, interactive=True) is True
    assert confirmation_needed(yes=True, interactive=False) is False
    assert confirmation_needed(yes=True, interactive=True) is False
    with pytest.raises(KlutchError) as raised:
        confirmation_needed(yes=False, interactive=False)
    assert "--yes" in raised.value.fix


def test_claims_for_refuses_unknown_and_forbidden_apis() -> None:
    offered = [
        {"api": API, "allowed": True, "permissionClaims": [SECRETS_CLAIM]},
        {"api": "servicebindings.anynines.com", "allowed": False, "reason": "dbas-only"},
    ]
    assert claims_for(offered, [API]) == {API: [SECRETS_CLAIM]}
    with pytest.raises(KlutchError, match=r"not offered: redis\.example\.com"):
        claims_for(offered, ["redis.example.com"])
    with pytest.raises(KlutchError, match="dbas-only"):
        claims_for(offered, [API, "servicebindings.anynines.com"])


def test_a_token_comes_from_the_option_or_needs_an_issuer() -> None:
    assert bearer_token(None, "given", None) == "given"
    with pytest.raises(KlutchError, match="--issuer"):
        bearer_token(None, None, None)
