"""The provider process: its CRDs, one reconciler per kind, usage tracking, a health endpoint.

``bootstrap`` writes a ProviderConfig and its Secret for a server given on the command line, so a
stack can start the provider already pointing at its PostgreSQL.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from klutch_gitops.dev.local_provider.api import (
    BACKUPS,
    DATABASES,
    FIELD_MANAGER,
    PROVIDER_CONFIGS,
    RESTORES,
    USERS,
    load_crds,
    provider_config_name,
)
from klutch_gitops.dev.local_provider.backup import LocalBackup
from klutch_gitops.dev.local_provider.database import LocalDatabase
from klutch_gitops.dev.local_provider.managed import ManagedReconciler
from klutch_gitops.dev.local_provider.providerconfig import ProviderConfigController
from klutch_gitops.dev.local_provider.restore import LocalRestore
from klutch_gitops.dev.local_provider.server import Connector
from klutch_gitops.dev.local_provider.user import LocalUser
from klutch_gitops.kube.client import NAMESPACES, SECRETS, Kube
from klutch_gitops.kube.crds import install_crds

POLL_INTERVAL = 60.0  # Crossplane's default: how soon drift on the server is repaired


class LocalProvider:
    def __init__(
        self,
        kube: Kube,
        *,
        backup_dir: Path | None,
        bin_dir: Path,
        poll_interval: float = POLL_INTERVAL,
        workers: int = 2,
    ) -> None:
        self.kube = kube
        connector = Connector(kube, backup_dir, bin_dir)
        self.provider_configs = ProviderConfigController(kube, self.users)
        self.reconcilers = {
            resource.kind: ManagedReconciler(
                kube,
                resource,
                external,
                connector,
                poll_interval=poll_interval,
                workers=workers,
                on_event=self._usage_changed,
            )
            for resource, external in (
                (DATABASES, LocalDatabase()),
                (USERS, LocalUser()),
                (BACKUPS, LocalBackup()),
                (RESTORES, LocalRestore()),
            )
        }

    def start(self) -> LocalProvider:
        install_crds(self.kube.api, load_crds())
        self.provider_configs.start()
        for reconciler in self.reconcilers.values():
            reconciler.start()
        return self

    def stop(self) -> None:
        for reconciler in self.reconcilers.values():
            reconciler.stop()
        self.provider_configs.stop()

    def synced(self) -> bool:
        informers = [r.informer for r in self.reconcilers.values()]
        return all(i.synced.is_set() for i in [*informers, self.provider_configs.informer])

    def users(self, provider_config: str) -> int:
        return sum(
            provider_config_name(obj) == provider_config
            for reconciler in self.reconcilers.values()
            for obj in reconciler.informer.items()
        )

    def _usage_changed(self, _event: str, obj: dict[str, Any]) -> None:
        self.provider_configs.queue.add(provider_config_name(obj))


def bootstrap(
    kube: Kube,
    name: str,
    *,
    host: str,
    port: int,
    username: str,
    password: str,
    namespace: str,
) -> None:
    """ProviderConfig ``name`` and its Secret ``<namespace>/<name>-postgresql`` for one server."""
    secret = f"{name}-postgresql"
    kube.apply(
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        field_manager=FIELD_MANAGER,
    )
    values = {"endpoint": host, "port": str(port), "username": username, "password": password}
    kube.apply(
        SECRETS,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret, "namespace": namespace},
            "type": "Opaque",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()},
        },
        field_manager=FIELD_MANAGER,
        force=True,
    )
    kube.apply(
        PROVIDER_CONFIGS,
        {
            "apiVersion": PROVIDER_CONFIGS.api_version,
            "kind": PROVIDER_CONFIGS.kind,
            "metadata": {"name": name},
            "spec": {
                "credentials": {
                    "source": "PostgreSQLConnectionSecret",
                    "connectionSecretRef": {"name": secret, "namespace": namespace},
                }
            },
        },
        field_manager=FIELD_MANAGER,
        force=True,
    )


def serve_health(port: int, ready: Callable[[], bool]) -> ThreadingHTTPServer:
    """``/healthz`` and ``/readyz`` on loopback: 200 once every cache is filled, else 503."""

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path not in ("/healthz", "/readyz"):
                self.send_error(404)
                return
            ok = ready()
            body = b"ok\n" if ok else b"caches not synced yet\n"
            self.send_response(200 if ok else 503)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes are not news
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
