"""Klutch's browser bind flow attacked through the real bind API, the real Dex login form and the
real Control Plane: a replayed ``POST /bind`` (same cookie, same CSRF token, on the same replica
and on another one), and callback URLs and ports that must never start a login.

What Klutch's own ``kubectl bind`` sends, and must keep working (anynines/klutchio):
bind/pkg/kubectl/bind/authenticator/authenticator.go ``Endpoint()`` serves
``http://localhost:<port>/callback``, and bind/pkg/kubectl/bind/plugin/authenticate.go passes only
its port as ``p``, with the session ID ``s`` and the cluster ID ``c`` (six base62 characters each,
plugin/bind.go ``SessionID``/``ClusterID``).
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import httpx
import pytest
import uvicorn
import yaml

from bind_api.bindings import BINDER_SECRET, unbind
from bind_api.browser_flow import SESSION_COOKIE
from bind_api.config import BindApiConfig, BrowserFlow
from bind_api.ledger import SESSION_LABEL
from bind_api.server import build_server
from klutch_gitops.apis import TEMPLATES
from klutch_gitops.authz import ALLOWED_GROUPS_ANNOTATION
from klutch_gitops.config import SecretRef
from klutch_gitops.consumer import PROVIDER_SECRETS
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import LEASES, NAMESPACES, SECRETS
from tests.integration.bindapi import serving
from tests.integration.dexflows import browser
from tests.integration.test_bind_browser import CliCallback, choices, log_in, start
from tests.kit.wait import eventually

POSTGRES = "postgresqlinstances.anynines.com"


@dataclass
class Replicas:
    """Two bind API replicas sharing the session key, as the chart runs them."""

    url: str  # the one Dex redirects to
    other: str
    admin: Kube


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture(scope="module")
def replicas(
    stack: StackInfo, clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Replicas]:
    admin = Kube(clusters["control-plane"])
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    templates = f"a-sec-browser-{uuid.uuid4().hex[:6]}"  # sorts first: this template wins
    admin.apply(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": templates}}
    )
    admin.apply(
        TEMPLATES[0],
        {
            "apiVersion": TEMPLATES[0].api_version,
            "kind": TEMPLATES[0].kind,
            "metadata": {
                "name": "postgresqlinstances",
                "namespace": templates,
                "annotations": {ALLOWED_GROUPS_ANNOTATION: "team-a"},
            },
            "spec": {
                "APIServiceSelector": {"group": "anynines.com", "resource": "postgresqlinstances"},
                "permissionClaims": [PROVIDER_SECRETS],
            },
        },
    )
    keys = tmp_path_factory.mktemp("browser-keys")
    (keys / "client-secret").write_text(stack.dex.web_client_secret)
    (keys / "session-key").write_bytes(secrets.token_bytes(48))
    url = f"http://127.0.0.1:{stack.bind_api_port}"
    # The integration tier's browser module may still be giving this port back.
    eventually(lambda: _port_free(stack.bind_api_port), "the bind API port to be free")

    def server(port: int) -> uvicorn.Server:
        return build_server(
            BindApiConfig(
                control_plane_kubeconfig=Path(stack.clusters["control-plane"].kubeconfig),
                issuer=stack.dex.issuer,
                audiences=(stack.dex.automation_client_id,),
                issuer_ca=Path(stack.dex.ca),
                listen=f"127.0.0.1:{port}",
                browser=BrowserFlow(
                    external_url=url,
                    client_id=stack.dex.web_client_id,
                    client_secret=SecretRef(file=keys / "client-secret"),
                    session_key=SecretRef(file=keys / "session-key"),
                ),
            )
        )

    with serving(server(stack.bind_api_port)) as first, serving(server(free_port())) as other:
        yield Replicas(first, other, admin)
    admin.delete(NAMESPACES, None, templates)


@pytest.fixture
def cli_callback() -> Iterator[CliCallback]:
    callback = CliCallback()
    yield callback
    callback.close()


def test_a_replayed_bind_binds_nothing_on_any_replica(
    replicas: Replicas, stack: StackInfo, cli_callback: CliCallback
) -> None:
    """Before: the same session cookie and CSRF token within 15 minutes minted a new binder
    token on every POST. The session's use is now a Lease on the Control Plane."""
    with browser(stack) as http:
        back = log_in(http, start(http, replicas, cli_callback.url, "replay"), stack)
        csrf, apis = choices(http.get(back.headers["location"], follow_redirects=True))
        stolen = http.cookies[SESSION_COOKIE]  # what an attacker captured, with the form
        done = http.post(f"{replicas.url}/bind", data={"csrf": csrf, "api": apis})
        assert done.status_code == 303, done.text
        assert http.get(done.headers["location"]).status_code == 200

    (query,) = cli_callback.queries
    response = json.loads(base64.b64decode(parse_qs(query)["response"][0]))
    kubeconfig = yaml.safe_load(base64.b64decode(response["kubeconfig"]))
    consumer = kubeconfig["contexts"][0]["context"]["namespace"]
    try:
        binder = replicas.admin.get(SECRETS, consumer, BINDER_SECRET)
        assert binder is not None
        for url in (replicas.url, replicas.other):
            with httpx.Client(cookies={SESSION_COOKIE: stolen}) as attacker:
                replay = attacker.post(f"{url}/bind", data={"csrf": csrf, "api": apis})
            assert replay.status_code == 409, url
            assert "this bind session was already used, so this request bound nothing" in (
                unescape(replay.text)
            )
            assert "start again from the CLI" in unescape(replay.text)
            assert "location" not in replay.headers
        assert cli_callback.queries == [query]  # no second BindingResponse, so no second token
        after = replicas.admin.get(SECRETS, consumer, BINDER_SECRET)
        assert after["metadata"]["resourceVersion"] == binder["metadata"]["resourceVersion"]
        assert after["data"] == binder["data"]
        used, _ = replicas.admin.list(LEASES, "default", label_selector=f"{SESSION_LABEL}=used")
        assert used, "the session's use is recorded on the Control Plane"
        assert all(secrets_free(lease) for lease in used)
    finally:
        unbind(replicas.admin, consumer)


def secrets_free(lease: dict) -> bool:
    """A record names a hash of the session, never the session, its CSRF token or the person."""
    text = json.dumps(lease)
    return lease["metadata"]["name"].startswith("bind-session-") and "@" not in text


# Spellings of the callback that some URL parser reads as another host, or that carry more than
# a loopback address and a path (userinfo, fragment, whitespace, control characters, query).
HOSTILE_CALLBACKS = [
    "http://evil.example\\@localhost:1234/callback",
    "http://localhost:1234/callback#@evil.example",
    "http://localhost:1234#@evil.example/callback",
    "http://local\thost:1234/callback",
    "http://localhost\t:1234/callback",
    "http://localhost :1234/callback",
    "http://localhost\r\n:1234/callback",
    "http://user:pass@localhost:1234/callback",
    "http://localhost@evil.example:1234/callback",
    "http://evil.example:1234/callback",
    "http://localhost.evil.example:1234/callback",
    "http://127.0.0.1.nip.io:1234/callback",
    "http://0x7f000001:1234/callback",
    "https://localhost:1234/callback",
    "http://localhost/callback",
    "http://localhost:1234/callback?next=https://evil.example",
    "//localhost:1234/callback",
]


@pytest.mark.parametrize("callback", HOSTILE_CALLBACKS)
def test_a_hostile_callback_never_starts_a_login(
    replicas: Replicas, stack: StackInfo, callback: str
) -> None:
    with browser(stack) as http:
        refused = http.get(
            f"{replicas.url}/authorize",
            params={"redirect_url": callback, "session_id": "s", "cluster_id": "c"},
        )
    assert refused.status_code == 400
    text = unescape(refused.text)
    assert "is not a loopback callback" in text
    assert "http://localhost:&lt;port&gt;/callback" in refused.text  # the fix, escaped in HTML
    assert "location" not in refused.headers
    cookie = refused.headers.get("set-cookie", "")
    assert "klutch_bind_login" not in cookie or 'klutch_bind_login=""' in cookie  # only cleared


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"p": "99999", "s": "s", "c": "c"}, "p='99999' is not a port: use a number from 1"),
        ({"p": "abc", "s": "s", "c": "c"}, "p='abc' is not a port: use a number from 1"),
        ({"p": "0", "s": "s", "c": "c"}, "p='0' is not a port"),
        (
            {"redirect_url": "http://localhost:99999/cb", "session_id": "s", "cluster_id": "c"},
            "redirect_url port='99999' is not a port",
        ),
        ({"p": "4242", "s": "s", "c": "app#victim"}, "c 'app#victim' is not a cluster ID"),
        ({"p": "4242", "s": "s\x00", "c": "c"}, "s is not a session ID"),
    ],
)
def test_a_bad_port_or_id_is_a_400_naming_the_parameter(
    replicas: Replicas, stack: StackInfo, query: dict[str, str], message: str
) -> None:
    """Before: ports 99999 and abc were an HTTP 500."""
    with browser(stack) as http:
        refused = http.get(f"{replicas.url}/authorize?{urlencode(query)}")
    assert refused.status_code == 400
    assert message in unescape(refused.text)
    assert "location" not in refused.headers


@pytest.mark.parametrize(
    "query",
    [
        # Klutch's kubectl bind: only the port of http://localhost:<port>/callback (see above).
        {"p": "34961", "s": "4cgpcy", "c": "5hW2mW"},
        {"redirect_url": "http://127.0.0.1:4242/callback", "session_id": "s", "cluster_id": "c"},
        {"redirect_url": "http://[::1]:4242/callback", "session_id": "s", "cluster_id": "c"},
    ],
)
def test_the_callbacks_klutch_sends_still_start_a_login(
    replicas: Replicas, stack: StackInfo, query: dict[str, str]
) -> None:
    with browser(stack) as http:
        to_issuer = http.get(f"{replicas.url}/authorize?{urlencode(query)}")
    assert to_issuer.status_code == 302, to_issuer.text
    assert to_issuer.headers["location"].startswith(f"{stack.dex.issuer}/auth?")
