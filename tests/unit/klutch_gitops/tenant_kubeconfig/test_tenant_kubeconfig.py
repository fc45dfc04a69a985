"""Tenant kubeconfigs: every field client-go knows that could run a command, read a file or reach
another host is refused by name; the shapes bind, ``kubectl config view --minify --flatten`` and
the local stack write are accepted; the client trusts only the kubeconfig's CA.

Field names are client-go's, from k8s.io/client-go/tools/clientcmd/api/v1/types.go (kubernetes/
kubernetes, staging/src/k8s.io/client-go/tools/clientcmd/api/v1/types.go).
"""

from __future__ import annotations

import base64
import copy
import http.server
import ssl
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from klutch_gitops import tenant_kubeconfig
from klutch_gitops.dev.localstack import kubeconfig as localstack_kubeconfig
from klutch_gitops.dev.localstack.pki import KeyPair, issue, new_ca, new_key
from klutch_gitops.kube import client as kube
from klutch_gitops.kube.client import Kube, KubeError
from klutch_gitops.tenant_kubeconfig import load_client, parse
from klutch_gitops.tenant_kubeconfig.problems import KubeconfigRefused

TOKEN = "t0ken-Secret.value"  # must never show up in an error
CA = new_ca("tenant-ca")
CLIENT = issue(CA, "tenant", client=True)
SERVING = issue(CA, "localhost", sans=("localhost", "127.0.0.1"), server=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def with_token(server: str = "https://app.example:6443") -> dict[str, Any]:
    """The shape of bind's binder kubeconfig: a token, the CA inline, a context namespace."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "app",
        "clusters": [
            {
                "name": "app",
                "cluster": {"server": server, "certificate-authority-data": b64(CA.cert_pem)},
            }
        ],
        "users": [{"name": "me", "user": {"token": TOKEN}}],
        "contexts": [
            {"name": "app", "context": {"cluster": "app", "user": "me", "namespace": "x"}}
        ],
    }


def with_certificate(server: str = "https://127.0.0.1:6443") -> dict[str, Any]:
    """The local stack's own kubeconfig shape (klutch_gitops/dev/localstack/kubeconfig.py)."""
    return localstack_kubeconfig.render("app", server, CA.cert_pem, CLIENT.cert_pem, CLIENT.key_pem)


def refused(document: Any) -> KubeconfigRefused:
    text = document if isinstance(document, str | bytes) else yaml.safe_dump(document)
    with pytest.raises(KubeconfigRefused) as raised:
        parse(text)
    error = raised.value
    assert TOKEN not in str(error)
    assert CLIENT.key_pem.decode().splitlines()[1] not in str(error)
    return error


def changed(base: Callable[[], dict[str, Any]], change: Callable[[dict], Any]) -> dict[str, Any]:
    document = copy.deepcopy(base())
    change(document)
    return document


def user(doc: dict) -> dict:
    return doc["users"][0]["user"]


def cluster(doc: dict) -> dict:
    return doc["clusters"][0]["cluster"]


# -- accepted ---------------------------------------------------------------------------------


def test_the_local_stacks_own_kubeconfig_is_accepted() -> None:
    parsed = parse(yaml.safe_dump(with_certificate()))
    assert parsed.server == "https://127.0.0.1:6443"
    assert parsed.token is None
    assert parsed.client_cert_pem == CLIENT.cert_pem
    assert parsed.ca_pem == CA.cert_pem
    key = serialization.load_pem_private_key(parsed.client_key_pem or b"", password=None)
    assert (
        key.private_numbers()
        == serialization.load_pem_private_key(CLIENT.key_pem, password=None).private_numbers()
    )
    assert TOKEN not in repr(parsed)
    assert "PRIVATE KEY" not in repr(parsed)


def test_a_token_kubeconfig_like_binds_is_accepted() -> None:
    parsed = parse(yaml.safe_dump(with_token()))
    assert (parsed.server, parsed.token, parsed.client_cert_pem) == (
        "https://app.example:6443",
        TOKEN,
        None,
    )


def test_kubectls_minified_flattened_output_is_accepted() -> None:
    document = with_token()
    document["preferences"] = {}
    cluster(document).update(
        {
            "insecure-skip-tls-verify": False,
            "tls-server-name": "kubernetes.default.svc",
            "disable-compression": True,
        }
    )
    user(document).update(
        {"client-certificate-data": b64(CLIENT.cert_pem), "client-key-data": b64(CLIENT.key_pem)}
    )
    parsed = parse(yaml.safe_dump(document))
    assert parsed.tls_server_name == "kubernetes.default.svc"
    assert parsed.token == TOKEN
    assert parsed.client_cert_pem == CLIENT.cert_pem


@pytest.mark.parametrize(
    ("server", "rebuilt"),
    [
        ("https://app.example:6443/", "https://app.example:6443"),
        ("https://app.example", "https://app.example"),
        ("https://[::1]:6443", "https://[::1]:6443"),
        ("https://rancher.example/k8s/clusters/c-1", "https://rancher.example/k8s/clusters/c-1"),
    ],
)
def test_servers_are_rebuilt_from_their_checked_parts(server: str, rebuilt: str) -> None:
    assert parse(yaml.safe_dump(with_token(server))).server == rebuilt


def test_a_ca_bundle_of_several_certificates_is_kept_whole() -> None:
    other = new_ca("another-root").cert_pem
    document = changed(
        with_token,
        lambda d: cluster(d).update({"certificate-authority-data": b64(CA.cert_pem + other)}),
    )
    assert parse(yaml.safe_dump(document)).ca_pem == CA.cert_pem + other


def test_json_text_and_bytes_are_read_alike() -> None:
    import json

    assert parse(json.dumps(with_token()).encode()).token == TOKEN


# -- refused, by field --------------------------------------------------------------------------


REFUSED_USER_FIELDS = {
    "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "touch", "args": ["/x"]},
    "auth-provider": {"name": "oidc", "config": {"idp-issuer-url": "https://evil.example"}},
    "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
    "client-certificate": "/etc/klutch/admin.crt",
    "client-key": "/etc/klutch/admin.key",
    "username": "admin",
    "password": "hunter2",
    "as": "system:admin",
    "as-uid": "0",
    "as-groups": ["system:masters"],
    "as-user-extra": {"scopes": ["all"]},
    "extensions": [{"name": "x", "extension": {}}],
}


@pytest.mark.parametrize(("name", "value"), REFUSED_USER_FIELDS.items())
def test_user_fields_that_run_read_or_impersonate_are_refused_by_name(
    name: str, value: Any
) -> None:
    error = refused(changed(with_token, lambda d: user(d).update({name: value})))
    assert [p.field for p in error.problems] == [f"users[0].user.{name}"]
    assert error.message.startswith(f"users[0].user.{name}: ")
    assert error.fix


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("certificate-authority", "/etc/ssl/ca.crt", "names a file"),
        ("proxy-url", "http://127.0.0.1:3128", "proxy"),
        ("insecure-skip-tls-verify", True, "any server certificate"),
        ("extensions", [{"name": "x", "extension": {}}], "extensions"),
        ("tls-server-name", "not a name!", "DNS name"),
        ("disable-compression", "yes", "true or false"),
        ("server-side-magic", 1, "not a field the reconciler reads"),
    ],
)
def test_cluster_fields_that_read_files_or_reach_other_hosts_are_refused_by_name(
    name: str, value: Any, says: str
) -> None:
    error = refused(changed(with_token, lambda d: cluster(d).update({name: value})))
    assert [p.field for p in error.problems] == [f"clusters[0].cluster.{name}"]
    assert says in error.message


@pytest.mark.parametrize(
    ("server", "says"),
    [
        ("http://app.example:6443", "https://"),
        ("HTTPS://app.example", "https://"),
        ("app.example:6443", "https://"),
        ("file:///etc/passwd", "https://"),
        ("https://user:pw@app.example", "credentials"),
        ("https://app.example/?x=1", "query or fragment"),
        ("https://app.example/#@evil.example", "query or fragment"),
        ("https://app.example:99999", "not a valid"),
        ("https://app.example:abc", "not a valid"),
        ("https://app.example:0", "not a valid"),
        ("https://", "not a valid"),
        ("https://evil.example\\@app.example", "backslashes"),
        ("https://app.exa\tmple", "control characters"),
        ("https://bad_host.example", "not a valid"),
        ("https://1.2.3", "not a valid"),
        ("https://[fe80::1%25eth0]:6443", "not a valid"),
        ("https://[::1", "not a valid"),
        ("https://[v1.x]/", "not a valid"),
        ("", "is missing"),
        (6443, "is missing"),
    ],
)
def test_only_plain_https_servers_are_accepted(server: Any, says: str) -> None:
    error = refused(changed(with_token, lambda d: cluster(d).update({"server": server})))
    assert [p.field for p in error.problems] == ["clusters[0].cluster.server"]
    assert says in error.message


def test_the_ca_is_required_inline() -> None:
    error = refused(changed(with_token, lambda d: cluster(d).pop("certificate-authority-data")))
    assert error.message.startswith("clusters[0].cluster.certificate-authority-data: is missing")
    assert "CA certificate" in error.fix


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("not base64!", "not valid base64"),
        (b64(b"just text"), "no valid PEM certificate"),
        (b64(CLIENT.key_pem), "no valid PEM certificate"),
        (["a list"], "not a base64 string"),
    ],
)
def test_a_ca_that_is_not_base64_pem_certificates_is_refused(value: Any, says: str) -> None:
    error = refused(
        changed(with_token, lambda d: cluster(d).update({"certificate-authority-data": value}))
    )
    assert error.problems[0].field == "clusters[0].cluster.certificate-authority-data"
    assert says in error.message


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (lambda u: u.pop("client-key-data"), "client-key-data", "is missing"),
        (lambda u: u.pop("client-certificate-data"), "client-certificate-data", "is missing"),
        (
            lambda u: u.update({"client-key-data": b64(serialization_of(new_key()))}),
            "client-key-data",
            "not the key of client-certificate-data",
        ),
        (
            lambda u: u.update({"client-key-data": b64(encrypted(CLIENT))}),
            "client-key-data",
            "encrypted key",
        ),
        (
            lambda u: u.update({"client-key-data": b64(CLIENT.cert_pem)}),
            "client-key-data",
            "no valid PEM private key",
        ),
        (
            lambda u: u.update({"client-certificate-data": "%%%"}),
            "client-certificate-data",
            "not valid base64",
        ),
    ],
)
def test_client_certificates_must_be_a_matching_pem_pair(
    change: Callable[[dict], Any], field: str, says: str
) -> None:
    error = refused(changed(with_certificate, lambda d: change(user(d))))
    assert [p.field for p in error.problems] == [f"users[0].user.{field}"]
    assert says in error.message


def serialization_of(key: Any) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def encrypted(pair: KeyPair) -> bytes:
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"pass"),
    )


@pytest.mark.parametrize(
    "token", [f"{TOKEN}\r\nX-Injected: 1", f"{TOKEN} more", 12345, "", "x" * 20000]
)
def test_a_token_must_be_one_word_of_visible_ascii(token: Any) -> None:
    error = refused(changed(with_token, lambda d: user(d).update({"token": token})))
    assert [p.field for p in error.problems] == ["users[0].user.token"]


def test_a_user_without_credentials_is_refused() -> None:
    error = refused(changed(with_token, lambda d: user(d).pop("token")))
    assert error.message == "users[0].user: has no credentials"


@pytest.mark.parametrize(
    ("change", "field", "says"),
    [
        (lambda d: d["users"].append({"name": "b", "user": {"token": "x"}}), "users", "2 entries"),
        (lambda d: d.pop("clusters"), "clusters", "is missing"),
        (lambda d: d.update({"contexts": {"app": {}}}), "contexts", "not a list"),
        (lambda d: d.update({"current-context": "other"}), "current-context", "one context"),
        (lambda d: d.pop("current-context"), "current-context", "one context"),
        (
            lambda d: d["contexts"][0]["context"].update({"user": "someone"}),
            "contexts[0].context.user",
            "one user",
        ),
        (
            lambda d: d["contexts"][0]["context"].update({"extensions": []}),
            "contexts[0].context.extensions",
            "extensions",
        ),
        (lambda d: d.update({"extensions": []}), "extensions", "extensions"),
        (
            lambda d: d.update({"preferences": {"extensions": []}}),
            "preferences.extensions",
            "extensions",
        ),
        (lambda d: d.update({"kind": "Secret"}), "kind", "must be Config"),
        (lambda d: d.update({"apiVersion": "v2"}), "apiVersion", "must be v1"),
        (lambda d: d.update({"plugins": {}}), "plugins", "not a field"),
        (lambda d: d["users"][0].update({"extra": 1}), "users[0].extra", "not a field"),
        (lambda d: d["users"][0].update({"name": ""}), "users[0].name", "non-empty string"),
        (lambda d: d["clusters"].__setitem__(0, "app"), "clusters[0]", "mapping"),
    ],
)
def test_exactly_one_cluster_user_and_context_are_accepted(
    change: Callable[[dict], Any], field: str, says: str
) -> None:
    error = refused(changed(with_token, change))
    assert field in [p.field for p in error.problems]
    assert says in next(p.problem for p in error.problems if p.field == field)


def test_every_refused_field_is_named_at_once() -> None:
    def hostile(d: dict) -> None:
        user(d)["exec"] = {"command": "sh"}
        cluster(d)["proxy-url"] = "http://evil.example"
        cluster(d)["server"] = "http://evil.example"

    error = refused(changed(with_token, hostile))
    assert {p.field for p in error.problems} == {
        "users[0].user.exec",
        "clusters[0].cluster.proxy-url",
        "clusters[0].cluster.server",
    }


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a: 1\n" + "b" * tenant_kubeconfig.MAX_BYTES, "more than"),
        ("clusters: [\n", "not YAML we accept"),
        ("a: 1\na: 2\n", "appears twice"),
        ("[" * 100 + "]" * 100, "nests deeper"),
        (
            "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
            + "".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
                for i in range(8)
            ),
            "YAML nodes",
        ),
        ("", "is empty"),
        ("- a list", "not a mapping"),
        ("a: 1\n---\nb: 2\n", "YAML documents"),
        (b"\xff\xfe", "not UTF-8"),
    ],
)
def test_hostile_text_is_refused_before_any_field_is_read(text: str | bytes, says: str) -> None:
    error = refused(text)
    assert error.problems[0].field == "kubeconfig"
    assert says in error.message


def test_kube_api_client_parses_text_and_mappings_as_tenant_input(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hostile = changed(
        with_token, lambda d: user(d).update({"exec": {"command": "touch", "args": [str(marker)]}})
    )
    for given in (hostile, yaml.safe_dump(hostile)):
        with pytest.raises(KubeconfigRefused, match=r"users\[0\]\.user\.exec"):
            kube.api_client(given)
    assert not marker.exists()
    with pytest.raises(ValueError, match="files only"):
        kube.api_client(yaml.safe_dump(with_token()), context="app")


# -- the client -------------------------------------------------------------------------------


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, str]]] = []
    redirect_to: ClassVar[str | None] = None  # answer every request with a 307 to here

    def do_GET(self) -> None:
        if Recorder.redirect_to is not None:
            self.send_response(307)
            self.send_header("Location", Recorder.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        Recorder.seen.append(
            {
                "path": self.path,
                "authorization": self.headers.get("Authorization", ""),
                "client": self.connection.getpeercert()["subject"][0][0][1],
            }
        )
        body = b'{"kind": "APIVersions", "versions": ["v1"]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        return


@pytest.fixture
def mtls_server(tmp_path: Path) -> Iterator[str]:
    """A loopback HTTPS server with a certificate of CA that requires a client certificate."""
    for name, data in (("ca", CA.cert_pem), ("crt", SERVING.cert_pem), ("key", SERVING.key_pem)):
        (tmp_path / name).write_bytes(data)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tmp_path / "ca"))
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(tmp_path / "crt", tmp_path / "key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Recorder.seen.clear()
    yield f"https://127.0.0.1:{server.server_address[1]}"
    Recorder.redirect_to = None
    server.shutdown()
    server.server_close()


def test_the_client_presents_the_certificate_and_token_and_leaves_no_file(
    mtls_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    document = with_certificate(mtls_server)
    user(document)["token"] = TOKEN
    api = load_client(yaml.safe_dump(document))
    assert list((tmp_path / "tmp").iterdir()) == []  # the key was on disk only while loading
    assert Kube(api)._call("GET", "/api") == {"kind": "APIVersions", "versions": ["v1"]}
    assert Recorder.seen == [
        {"path": "/api", "authorization": f"Bearer {TOKEN}", "client": "tenant"}
    ]


def test_a_client_rebuilt_from_the_configuration_still_trusts_the_kubeconfigs_ca(
    mtls_server: str,
) -> None:
    """Without our TLS context it has no client certificate, so the server refuses it; but it
    verified the server with the kubeconfig's CA, not the system's roots."""
    api = load_client(with_certificate(mtls_server))
    rebuilt = client.ApiClient(api.configuration)
    rebuilt.rest_client.pool_manager.connection_pool_kw["retries"] = False
    with pytest.raises(KubeError) as raised:
        Kube(rebuilt)._call("GET", "/api")
    assert "CERTIFICATE_VERIFY_FAILED" not in str(raised.value)
    assert Recorder.seen == []


def test_the_client_trusts_only_the_kubeconfigs_ca(mtls_server: str) -> None:
    other = new_ca("someone-else")
    document = with_certificate(mtls_server)
    cluster(document)["certificate-authority-data"] = b64(other.cert_pem)
    api = load_client(document)
    api.rest_client.pool_manager.connection_pool_kw["retries"] = False
    with pytest.raises(KubeError, match="CERTIFICATE_VERIFY_FAILED"):
        Kube(api)._call("GET", "/api")
    assert Recorder.seen == []


class Internal(http.server.BaseHTTPRequestHandler):
    """A plain-http service inside the reconciler's network, which a tenant must not read."""

    seen: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        Internal.seen.append(self.path)
        body = b"INTERNAL-SECRET-DATA"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        return


def test_the_client_follows_no_redirect_of_the_tenants_server(mtls_server: str) -> None:
    """The tenant's own server (its CA, its certificate) redirects to a plain-http address: the
    client stops at the 307, and the internal service's answer never reaches an error message
    that would be written to the tenant's reconcile.yaml."""
    internal = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Internal)
    threading.Thread(target=internal.serve_forever, daemon=True).start()
    Internal.seen.clear()
    Recorder.redirect_to = f"http://127.0.0.1:{internal.server_address[1]}/api/v1/secrets"
    try:
        api = load_client(with_certificate(mtls_server))
        with pytest.raises(KubeError) as raised:
            Kube(api)._call("GET", "/api")
    finally:
        internal.shutdown()
        internal.server_close()
    assert raised.value.status == 307
    assert "INTERNAL-SECRET-DATA" not in str(raised.value)
    assert Internal.seen == []
