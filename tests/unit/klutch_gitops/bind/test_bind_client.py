"""The bind API client's error mapping, the App Cluster builders, and the CLI's pure decisions."""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path

import httpx
import pytest
import yaml

from klutch_gitops.apis import API_SERVICE_BINDINGS, CONSUMER_LABEL
from klutch_gitops.bind import client as bind_client
from klutch_gitops.bind.app_cluster import write_gitops
from klutch_gitops.bind.cli import bearer_token
from klutch_gitops.bind.client import BindClient
from klutch_gitops.bind.request import (
    claims_for,
    confirmation_needed,
    git_credentials,
    minified_kubeconfig,
    repository_body,
)
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.resources import NAMESPACES, SECRETS

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
        (API_SERVICE_BINDINGS, "APIServiceBinding"),
    ]
    secret, binding = objects[1][1], objects[2][1]
    assert secret["metadata"] == {
        "name": "cluster-x-kubeconfig",
        "namespace": "klutch-bind",
        "labels": {CONSUMER_LABEL: "cluster-x"},
    }
    assert base64.b64decode(secret["data"]["kubeconfig"]).decode() == "kubeconfig: yes\n"
    assert binding["metadata"]["name"] == API
    assert "namespace" not in binding["metadata"]  # cluster-scoped, as Klutch's
    assert not API_SERVICE_BINDINGS.namespaced
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


def test_an_untrusted_certificate_asks_for_the_ca() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        cause = ssl.SSLCertVerificationError(1, "certificate verify failed")
        cause.verify_message = "unable to get local issuer certificate"
        raise httpx.ConnectError("TLS failed", request=request) from cause

    with client(handler) as api, pytest.raises(KlutchError) as raised:
        api.exports()
    assert "TLS certificate at https://bind.test is not trusted" in raised.value.message
    assert "unable to get local issuer certificate" in raised.value.message
    assert raised.value.fix.startswith("pass --ca FILE")


def test_plain_http_that_gets_no_answer_suggests_https() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("Server disconnected", request=request)

    api = BindClient("http://bind.test", "tok", transport=httpx.MockTransport(handler))
    with api, pytest.raises(KlutchError) as raised:
        api.exports()
    assert "https://" in raised.value.fix


def test_an_unreadable_ca_is_a_klutch_error(tmp_path: Path) -> None:
    with pytest.raises(KlutchError, match="cannot use --ca"):
        BindClient("https://bind.test", "tok", ca=str(tmp_path / "missing.crt"))
    (tmp_path / "junk.crt").write_text("not a certificate")
    with pytest.raises(KlutchError, match="cannot use --ca"):
        BindClient("https://bind.test", "tok", ca=str(tmp_path / "junk.crt"))


def test_a_repository_body_needs_namespaces_and_a_url_without_credentials() -> None:
    assert repository_body(None, "main", ".", None, {}) is None
    body = repository_body("file:///srv/t.git", "dev", "claims", ["team"], {"username": "bot"})
    assert body == {
        "url": "file:///srv/t.git",
        "branch": "dev",
        "path": "claims",
        "appNamespaces": ["team"],
        "username": "bot",
    }
    with pytest.raises(KlutchError, match="--repo needs the App namespaces"):
        repository_body("file:///srv/t.git", "main", ".", None, {})
    with pytest.raises(KlutchError, match="not a repository URL"):
        repository_body("team", "main", ".", ["team"], {})
    for url in ("https://bot:hunter2@git.example/t.git", "https://tok3n@git.example/t.git"):
        with pytest.raises(KlutchError) as raised:
            repository_body(url, "main", ".", ["team"], {})
        assert "credentials in the URL" in raised.value.message
        assert "hunter2" not in raised.value.message
        assert "tok3n" not in raised.value.message
    assert repository_body("ssh://git@git.example/t.git", "main", ".", ["team"], {})


def test_git_credentials_come_from_files_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KLUTCH_GIT_PASSWORD", raising=False)
    assert git_credentials(None, None, None, None) == {}
    monkeypatch.setenv("KLUTCH_GIT_PASSWORD", "from-env")
    assert git_credentials("bot", None, None, None) == {"username": "bot", "password": "from-env"}
    (tmp_path / "pw").write_text("from-file\n")
    (tmp_path / "key").write_text("KEY\n")
    assert git_credentials(None, tmp_path / "pw", tmp_path / "key", None) == {
        "password": "from-file",
        "sshPrivateKey": "KEY\n",
    }
    with pytest.raises(KlutchError, match="cannot read --known-hosts"):
        git_credentials(None, None, None, tmp_path / "missing")


KUBECONFIG = """
apiVersion: v1
kind: Config
current-context: admin
clusters:
- {name: app, cluster: {server: https://app:6443, certificate-authority: ca.crt}}
- {name: other, cluster: {server: https://other:6443}}
users:
- {name: admin, user: {client-certificate: admin.crt, client-key: /keys/admin.key}}
- {name: bot, user: {tokenFile: token}}
- {name: cloud, user: {exec: {command: cloud-login}}}
- {name: other, user: {token: other-secret}}
contexts:
- {name: admin, context: {cluster: app, user: admin, namespace: team}}
- {name: bot, context: {cluster: app, user: bot}}
- {name: cloud, context: {cluster: app, user: cloud}}
- {name: other, context: {cluster: other, user: other}}
"""


def test_the_app_kubeconfig_is_one_context_with_files_inlined(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("CA")
    (tmp_path / "admin.crt").write_text("CERT")
    (tmp_path / "token").write_text("bot-token\n")
    keys = tmp_path / "keys"
    text = KUBECONFIG.replace("/keys/", f"{keys}/")
    keys.mkdir()
    (keys / "admin.key").write_text("KEY")

    admin = yaml.safe_load(minified_kubeconfig(text, None, tmp_path, "kc"))
    assert admin["current-context"] == "admin"
    assert [c["name"] for c in admin["contexts"]] == ["admin"]
    assert admin["contexts"][0]["context"]["namespace"] == "team"
    assert admin["clusters"] == [
        {
            "name": "app",
            "cluster": {
                "server": "https://app:6443",
                "certificate-authority-data": base64.b64encode(b"CA").decode(),
            },
        }
    ]
    assert admin["users"][0]["user"] == {
        "client-certificate-data": base64.b64encode(b"CERT").decode(),
        "client-key-data": base64.b64encode(b"KEY").decode(),
    }
    assert "other-secret" not in yaml.safe_dump(admin)

    bot = yaml.safe_load(minified_kubeconfig(text, "bot", tmp_path, "kc"))
    assert bot["users"] == [{"name": "bot", "user": {"token": "bot-token"}}]
    with pytest.raises(KlutchError, match="through a plugin"):
        minified_kubeconfig(text, "cloud", tmp_path, "kc")
    with pytest.raises(KlutchError, match="has no context 'nowhere'") as raised:
        minified_kubeconfig(text, "nowhere", tmp_path, "kc")
    assert "admin, bot, cloud, other" in raised.value.fix
    (keys / "admin.key").unlink()
    with pytest.raises(KlutchError, match=r"admin\.key"):
        minified_kubeconfig(text, None, tmp_path, "kc")
