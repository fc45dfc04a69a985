"""Klutch's browser bind flow end to end: a browser (httpx with cookies) through the real bind
API and the real Dex login form, back to a CLI's loopback callback, with the real Control Plane.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
import yaml

from bind_api.bindings import unbind
from bind_api.server import serve_in_background
from klutch_gitops.apis import API_SERVICE_EXPORTS, EXPORT_REQUESTS
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube, api_client
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from tests.kit.wait import eventually

from .bindapi import browser_config, healthy, offer, withdraw
from .dexflows import browser, form

POSTGRES = "postgresqlinstances.anynines.com"
BINDINGS = "servicebindings.anynines.com"


@dataclass
class BindApi:
    url: str
    admin: Kube


@pytest.fixture(scope="module")
def bind_api(stack: StackInfo, clusters, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """The bind API with the browser flow on the port Dex's web client redirects to."""
    admin = Kube(clusters["control-plane"])
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    namespace = offer(
        admin, "a-browser", {"postgresqlinstances": "team-a", "servicebindings": "dbas-only"}
    )
    secrets = tmp_path_factory.mktemp("browser-secrets")
    url = f"http://127.0.0.1:{stack.bind_api_port}"
    server = serve_in_background(browser_config(stack, secrets))
    eventually(lambda: healthy(url), "the bind API to listen")
    yield BindApi(url, admin)
    server.should_exit = True
    withdraw(admin, namespace)


class CliCallback:
    """The CLI's one-shot loopback server that receives ``?response=``."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        """``host="localhost"`` listens as kubectl-bind's authenticator does (``localhost:0``)."""
        self.queries: list[str] = []
        received = self.queries

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                received.append(urlsplit(self.path).query)
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"bound, you may close this page")

            def log_message(self, *_: object) -> None:
                pass

        self.server = HTTPServer((host, 0), Handler)
        self.port = self.server.server_port
        self.url = f"http://{host}:{self.port}/callback"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def cli_callback() -> Iterator[CliCallback]:
    callback = CliCallback()
    yield callback
    callback.close()


def start(http: httpx.Client, api: BindApi, callback: str, session: str) -> httpx.Response:
    """What ``kubectl bind URL`` does: read the provider, open its authenticated URL."""
    provider = httpx.get(f"{api.url}/export").json()
    method = provider["authenticationMethods"][0]
    assert method["method"] == "OAuth2CodeGrant"
    query = urlencode({"redirect_url": callback, "session_id": session, "cluster_id": "app-1"})
    return http.get(f"{method['oauth2CodeGrant']['authenticatedURL']}?{query}")


def follow_issuer(http: httpx.Client, response: httpx.Response, issuer: str) -> httpx.Response:
    """Follow redirects while they stay at the issuer; return the first page or the way out."""
    while response.is_redirect:
        location = str(response.url.join(response.headers["location"]))
        if not location.startswith(issuer):
            return response
        response = http.get(location)
    return response


def log_in(http: httpx.Client, to_issuer: httpx.Response, stack: StackInfo) -> httpx.Response:
    """Submit the issuer's login form; its redirect back to the bind API is returned unfollowed."""
    assert to_issuer.status_code == 302, to_issuer.text
    page = follow_issuer(http, http.get(to_issuer.headers["location"]), stack.dex.issuer)
    action, fields = form(page)
    fields.update(login=stack.dex.email, password=stack.dex.password)
    back = follow_issuer(http, http.post(action, data=fields), stack.dex.issuer)
    assert back.is_redirect, f"the issuer did not redirect back: {back.status_code} {back.text}"
    return back


def choices(page: httpx.Response) -> tuple[str, list[str]]:
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf, page.text
    return unescape(csrf.group(1)), re.findall(r'name="api" value="([^"]+)"', page.text)


def test_the_provider_names_the_authorize_url(bind_api: BindApi) -> None:
    provider = httpx.get(f"{bind_api.url}/export").json()
    # Klutch's example-backend sends the bare GroupVersion and its binary version
    # (anynines/klutchio bind/contrib/example-backend/http/handler.go); kubectl-bind compares the
    # former with "v1alpha1" (bind/pkg/kubectl/bind/plugin/bind.go) and refuses a version below
    # v0.3.0 (authenticate.go, validateProviderVersion).
    assert provider["apiVersion"] == "v1alpha1"
    assert provider["version"] == "v1.5.0"
    assert provider["kind"] == "BindingProvider"
    assert provider["providerPrettyName"] == "klutch-gitops"
    assert provider["authenticationMethods"] == [
        {
            "method": "OAuth2CodeGrant",
            "oauth2CodeGrant": {"authenticatedURL": f"{bind_api.url}/authorize"},
        }
    ]


def test_a_browser_binds_and_the_cli_gets_a_working_binding(
    bind_api: BindApi, stack: StackInfo, cli_callback: CliCallback
) -> None:
    with browser(stack) as http:
        to_issuer = start(http, bind_api, cli_callback.url, "session-1")
        query = parse_qs(urlsplit(to_issuer.headers["location"]).query)
        assert query["code_challenge_method"] == ["S256"]
        assert query["client_id"] == [stack.dex.web_client_id]
        assert query["nonce"][0]
        assert query["state"][0]

        back = log_in(http, to_issuer, stack)
        resources = http.get(back.headers["location"], follow_redirects=True)
        assert resources.status_code == 200, resources.text
        assert stack.dex.email in resources.text
        csrf, bindable = choices(resources)
        assert bindable == [POSTGRES]  # servicebindings is for dbas-only
        assert "only members of dbas-only may bind it" in resources.text

        done = http.post(f"{bind_api.url}/bind", data={"csrf": csrf, "api": bindable})
        assert done.status_code == 303, done.text
        assert done.headers["location"].startswith(f"{cli_callback.url}?response=")
        assert http.get(done.headers["location"]).status_code == 200

        replay = http.post(f"{bind_api.url}/bind", data={"csrf": csrf, "api": bindable})
        assert replay.status_code == 401
        assert "no valid bind session" in replay.text

    (query,) = cli_callback.queries
    response = json.loads(base64.b64decode(parse_qs(query)["response"][0]))
    assert response["apiVersion"] == "klutch.anynines.com/v1alpha1"
    assert response["kind"] == "BindingResponse"
    grant = response["authentication"]["oauth2CodeGrant"]
    assert grant["sid"] == "session-1"
    assert grant["id"].startswith(f"{stack.dex.issuer}/")
    assert [r["metadata"]["name"] for r in response["requests"]] == [POSTGRES]
    kubeconfig = yaml.safe_load(base64.b64decode(response["kubeconfig"]))
    consumer = kubeconfig["contexts"][0]["context"]["namespace"]
    try:
        kubeconfig_file = Path(stack.state_dir) / f"{consumer}.kubeconfig"
        kubeconfig_file.write_text(yaml.safe_dump(kubeconfig))
        binder = Kube(api_client(kubeconfig_file))
        exports, _ = binder.list(API_SERVICE_EXPORTS, consumer)
        assert [e["metadata"]["name"] for e in exports] == [POSTGRES]
        request = binder.get(EXPORT_REQUESTS, consumer, POSTGRES)  # what kubectl bind waits on
        assert request is not None
        assert request["status"]["phase"] == "Succeeded"
    finally:
        unbind(bind_api.admin, consumer)


def test_a_refused_api_is_a_403_page_with_the_reason(
    bind_api: BindApi, stack: StackInfo, cli_callback: CliCallback
) -> None:
    with browser(stack) as http:
        back = log_in(http, start(http, bind_api, cli_callback.url, "s"), stack)
        csrf, _ = choices(http.get(back.headers["location"], follow_redirects=True))
        refused = http.post(f"{bind_api.url}/bind", data={"csrf": csrf, "api": [BINDINGS]})
        assert refused.status_code == 403
        assert "only members of dbas-only may bind it" in refused.text
        forged = http.post(f"{bind_api.url}/bind", data={"csrf": "x" + csrf, "api": [POSTGRES]})
        assert forged.status_code == 403
        assert "does not belong to this session" in forged.text
    assert cli_callback.queries == []


def test_a_callback_from_another_browsers_login_is_refused(
    bind_api: BindApi, stack: StackInfo, cli_callback: CliCallback
) -> None:
    """Login CSRF: the attacker's code and state, delivered to the victim's browser."""
    with browser(stack) as victim, browser(stack) as attacker:
        start(victim, bind_api, cli_callback.url, "victim")
        back = log_in(attacker, start(attacker, bind_api, cli_callback.url, "attacker"), stack)
        stolen = victim.get(back.headers["location"])
        assert stolen.status_code == 400
        assert "belongs to another login" in stolen.text

        callback = urlsplit(back.headers["location"])
        params = parse_qs(callback.query)
        state = params["state"][0]
        forged = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
        tampered = attacker.get(
            f"{bind_api.url}/callback?{urlencode({'code': params['code'][0], 'state': forged})}"
        )
        assert tampered.status_code == 400
        assert "not one this bind API issued" in tampered.text
    assert cli_callback.queries == []


def test_the_code_is_bound_to_the_pkce_verifier(
    bind_api: BindApi, stack: StackInfo, cli_callback: CliCallback
) -> None:
    """Dex registered the challenge: the code alone, without this login's verifier, is useless."""
    with browser(stack) as http:
        back = log_in(http, start(http, bind_api, cli_callback.url, "s"), stack)
        code = parse_qs(urlsplit(back.headers["location"]).query)["code"][0]
        token = http.post(
            f"{stack.dex.issuer}/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": f"{bind_api.url}/callback",
                "code_verifier": "w" * 64,
            },
            auth=(stack.dex.web_client_id, stack.dex.web_client_secret),
        )
    assert token.status_code == 400, token.text
    assert "id_token" not in token.text


@pytest.mark.parametrize(
    ("query", "message"),
    [
        (
            {"redirect_url": "https://evil.example/callback", "session_id": "s", "cluster_id": "c"},
            "is not a loopback callback",
        ),
        (
            {
                "redirect_url": "http://attacker.example:80/callback",
                "session_id": "s",
                "cluster_id": "c",
            },
            "is not a loopback callback",
        ),
        ({"session_id": "s", "cluster_id": "c"}, "/authorize needs redirect_url"),
        ({"p": "99999", "s": "s", "c": "c"}, "is not a port"),
    ],
)
def test_authorize_refuses_bad_callbacks(
    bind_api: BindApi, stack: StackInfo, query: dict[str, str], message: str
) -> None:
    with browser(stack) as http:
        refused = http.get(f"{bind_api.url}/authorize?{urlencode(query)}")
    assert refused.status_code == 400
    assert message in unescape(refused.text)
    assert "location" not in refused.headers


def test_kube_bind_short_parameters_start_a_login(bind_api: BindApi, stack: StackInfo) -> None:
    with browser(stack) as http:
        to_issuer = http.get(
            f"{bind_api.url}/authorize?{urlencode({'p': 4242, 's': 'x', 'c': 'y'})}"
        )
    assert to_issuer.status_code == 302
    assert to_issuer.headers["location"].startswith(f"{stack.dex.issuer}/auth?")
    assert "klutch_bind_login" in to_issuer.headers["set-cookie"]
    assert "httponly" in to_issuer.headers["set-cookie"].lower()
