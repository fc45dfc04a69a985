"""A real bind API for the tests of its clients: an offered API, the server in the background
(http or https), the dev user's ID token, and ``klutch-bind`` run as a subprocess."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from kubernetes import client

from bind_api.config import BindApiConfig, BrowserFlow
from klutch_gitops.apis import TEMPLATES
from klutch_gitops.authz import ALLOWED_GROUPS_ANNOTATION
from klutch_gitops.config import SecretRef
from klutch_gitops.consumer import PROVIDER_SECRETS
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import NAMESPACES
from tests.kit.wait import eventually

CLI = [sys.executable, "-m", "klutch_gitops.bind.cli"]
API = "postgresqlinstances.anynines.com"


def dev_id_token(stack: StackInfo) -> str:
    """An ID token of the dev user (groups team-a, klutch-developers) by the password grant."""
    with httpx.Client(verify=ssl.create_default_context(cafile=stack.dex.ca)) as http:
        response = http.post(
            f"{stack.dex.issuer}/token",
            data={
                "grant_type": "password",
                "username": stack.dex.email,
                "password": stack.dex.password,
                "scope": "openid email groups",
            },
            auth=(stack.dex.automation_client_id, stack.dex.automation_client_secret),
        )
    response.raise_for_status()
    return response.json()["id_token"]


def offer(admin: Kube, prefix: str, groups: dict[str, str]) -> str:
    """A namespace ``<prefix>-<random>`` with an APIServiceExportTemplate per plural of
    ``anynines.com`` in ``groups``, each allowed to those groups and claiming the Provider Secrets.
    Prefixes starting with ``a-`` sort first, so these templates win; the caller deletes it."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    admin.apply(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    for plural, allowed in groups.items():
        admin.apply(
            TEMPLATES[0],
            {
                "apiVersion": TEMPLATES[0].api_version,
                "kind": TEMPLATES[0].kind,
                "metadata": {
                    "name": plural,
                    "namespace": namespace,
                    "annotations": {ALLOWED_GROUPS_ANNOTATION: allowed},
                },
                "spec": {
                    "APIServiceSelector": {"group": "anynines.com", "resource": plural},
                    "permissionClaims": [PROVIDER_SECRETS],
                },
            },
        )
    return namespace


def withdraw(admin: Kube, namespace: str) -> None:
    """Delete ``offer``'s templates at once, then their namespace: a namespace only terminates,
    and its templates would still win the next test's pick meanwhile."""
    for resource in TEMPLATES:
        for template in admin.list(resource, namespace)[0]:
            admin.delete(resource, namespace, template["metadata"]["name"])
    admin.delete(NAMESPACES, None, namespace)


@contextmanager
def offered_api(clusters: dict[str, client.ApiClient], prefix: str = "a-bindcli") -> Iterator[str]:
    """The CRDs on both clusters and a template offering ``API`` to team-a with the Provider
    Secrets claim, in a namespace that sorts first (so this template wins); yields it."""
    admin = Kube(clusters["control-plane"])
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    install_crds(clusters["app"], load_crds(cluster="app"))
    namespace = offer(admin, prefix, {"postgresqlinstances": "team-a"})
    try:
        yield namespace
    finally:
        withdraw(admin, namespace)


def bind_api_config(stack: StackInfo, **changes: Any) -> BindApiConfig:
    """The stack's bind API config on a free loopback port, with ``changes``."""
    config = BindApiConfig(
        control_plane_kubeconfig=Path(stack.clusters["control-plane"].kubeconfig),
        issuer=stack.dex.issuer,
        audiences=(stack.dex.automation_client_id,),
        issuer_ca=Path(stack.dex.ca),
        listen=f"127.0.0.1:{free_port()}",
    )
    return replace(config, **changes)


def browser_config(stack: StackInfo, secret_dir: Path) -> BindApiConfig:
    """The stack's bind API with Klutch's browser flow on the port Dex redirects back to."""
    (secret_dir / "client-secret").write_text(stack.dex.web_client_secret)
    return bind_api_config(
        stack,
        listen=f"127.0.0.1:{stack.bind_api_port}",
        browser=BrowserFlow(
            external_url=f"http://127.0.0.1:{stack.bind_api_port}",
            client_id=stack.dex.web_client_id,
            client_secret=SecretRef(file=secret_dir / "client-secret"),
        ),
    )


@contextmanager
def serving(server: uvicorn.Server, ca: str | None = None) -> Iterator[str]:
    """Run a built server in a thread until the block ends; yields its base URL once healthy."""
    thread = threading.Thread(target=server.run, name="bind-api", daemon=True)
    thread.start()
    scheme = "https" if server.config.ssl_certfile else "http"
    url = f"{scheme}://{server.config.host}:{server.config.port}"
    try:
        eventually(lambda: healthy(url, ca), f"the bind API to answer at {url}")
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def healthy(url: str, ca: str | None = None) -> bool:
    verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=ca) if ca else True
    try:
        return httpx.get(f"{url}/healthz", verify=verify).status_code == 200
    except httpx.TransportError:
        return False


def token_args(tmp_path: Path, id_token: str) -> list[str]:
    """``--token-file FILE`` with ``id_token`` in an owner-only file: a token never goes on the
    command line (``klutch-bind`` refuses ``--token``)."""
    path = tmp_path / "id-token"
    path.touch(mode=0o600)
    path.write_text(id_token + "\n")
    return ["--token-file", str(path)]


def cli(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``klutch-bind ARGS`` in a child process with its own config home; never a terminal."""
    environment = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), **(env or {})}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=environment,
        check=False,
        input=stdin,
        stdin=subprocess.DEVNULL if stdin is None else None,
    )
