"""Run the bind API: its config, its Control Plane identity, its token verifier, uvicorn."""

import threading
from pathlib import Path

import uvicorn

from bind_api.app import create_app
from bind_api.config import BindApiConfig, load_bind_api_config
from bind_api.oidc import OIDCVerifier
from klutch_gitops.kube import Kube, api_client


def build_server(config: BindApiConfig) -> uvicorn.Server:
    admin = Kube(api_client(config.control_plane_kubeconfig))
    verifier = OIDCVerifier(config.issuer, config.audiences, ca=config.issuer_ca)
    host, _, port = config.listen.rpartition(":")
    return uvicorn.Server(
        uvicorn.Config(
            create_app(config, admin, verifier),
            host=host or "127.0.0.1",
            port=int(port),
            log_level="warning",
            access_log=False,
            ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
            ssl_keyfile=str(config.tls_key) if config.tls_key else None,
        )
    )


def serve_in_background(config: BindApiConfig) -> uvicorn.Server:
    server = build_server(config)
    threading.Thread(target=server.run, name="bind-api", daemon=True).start()
    return server


def serve(path: Path) -> None:
    """Run in the foreground until SIGINT/SIGTERM (uvicorn handles both)."""
    build_server(load_bind_api_config(path)).run()
