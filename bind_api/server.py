"""Run the bind API: its config, its Control Plane identity, its token verifier, uvicorn."""

import secrets
import threading
from pathlib import Path

import uvicorn

from bind_api.app import create_app
from bind_api.browser_login import BrowserLogin
from bind_api.config import BindApiConfig, BrowserFlow, load_bind_api_config
from bind_api.oidc import OIDCVerifier
from bind_api.sessions import MIN_KEY_BYTES, SessionCodec
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, api_client
from klutch_gitops.oidc_client import http_client
from klutch_gitops.serving import bounded_config
from klutch_gitops.settings import secret_value

BIND_API = "the bind API"  # who reads its secrets, in the errors that say what to restart


def build_server(config: BindApiConfig) -> uvicorn.Server:
    admin = Kube(api_client(config.control_plane_kubeconfig))
    verifier = OIDCVerifier(config.issuer, config.audiences, ca=config.issuer_ca)
    browser = browser_login(config, config.browser) if config.browser else None
    return uvicorn.Server(
        bounded_config(
            create_app(config, admin, verifier, browser),
            config.listen,
            log_level="warning",
            access_log=False,
            ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
            ssl_keyfile=str(config.tls_key) if config.tls_key else None,
        )
    )


def browser_login(config: BindApiConfig, flow: BrowserFlow) -> BrowserLogin:
    """The browser flow's run-time parts; its secrets are read once, here."""
    key = (
        secret_value(flow.session_key, "browser.sessionKey", program=BIND_API)
        if flow.session_key
        else None
    )
    if key is not None and len(key) < MIN_KEY_BYTES:
        raise KlutchError(
            f"browser.sessionKey has {len(key)} bytes, fewer than {MIN_KEY_BYTES}",
            "generate one with: head -c 48 /dev/urandom | base64 > session.key",
        )
    client_secret = secret_value(flow.client_secret, "browser.clientSecret", program=BIND_API)
    ca = str(config.issuer_ca) if config.issuer_ca else None
    return BrowserLogin(
        flow=flow,
        client_secret=client_secret.decode().strip(),
        codec=SessionCodec(key or secrets.token_bytes(MIN_KEY_BYTES)),
        verifier=OIDCVerifier(config.issuer, (flow.client_id,), ca=config.issuer_ca),
        http=http_client(ca),
        issuer=config.issuer,
    )


def serve_in_background(config: BindApiConfig) -> uvicorn.Server:
    server = build_server(config)
    threading.Thread(target=server.run, name="bind-api", daemon=True).start()
    return server


def serve(path: Path) -> None:
    """Run in the foreground until SIGINT/SIGTERM (uvicorn handles both)."""
    build_server(load_bind_api_config(path)).run()
