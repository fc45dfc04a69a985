"""The provider process: its CRDs, one reconciler per kind and scope, usage tracking, a health
endpoint.

Each kind is served twice by the same External: cluster-scoped (what Crossplane 1.x composes and
Klutch's claims use) and namespaced in the ``.m.`` group (Crossplane 2's managed resources).
``bootstrap`` writes a ProviderConfig, a ClusterProviderConfig of the same name and their Secret
for a server given on the command line, so a stack can start the provider already pointing at its
PostgreSQL in both flavours.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.crds import install_crds
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from klutch_local.provider.api import (
    BACKUPS,
    CLUSTER_PROVIDER_CONFIGS,
    DATABASES,
    FIELD_MANAGER,
    NAMESPACED_CRD_DIR,
    NS_PROVIDER_CONFIGS,
    PROVIDER_CONFIGS,
    RESTORES,
    USERS,
    ProviderConfigRef,
    load_crds,
    namespaced,
    provider_config_ref,
)
from klutch_local.provider.backup import LocalBackup
from klutch_local.provider.database import LocalDatabase
from klutch_local.provider.managed import External, ManagedReconciler
from klutch_local.provider.providerconfig import ProviderConfigController
from klutch_local.provider.restore import LocalRestore
from klutch_local.provider.server import Connector
from klutch_local.provider.user import LocalUser

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
        # what each managed resource named last: (apiVersion, kind, namespace, name) -> ref
        self._named: dict[tuple[str, str, str, str], ProviderConfigRef] = {}
        connector = Connector(kube, backup_dir, bin_dir)
        self.provider_configs = {
            resource: ProviderConfigController(kube, resource, self.users)
            for resource in (PROVIDER_CONFIGS, NS_PROVIDER_CONFIGS, CLUSTER_PROVIDER_CONFIGS)
        }
        kinds: list[tuple[Resource, External]] = [
            (DATABASES, LocalDatabase()),
            (USERS, LocalUser()),
            (BACKUPS, LocalBackup()),
            (RESTORES, LocalRestore()),
        ]
        self.reconcilers = {
            resource: ManagedReconciler(
                kube,
                resource,
                external,
                connector,
                poll_interval=poll_interval,
                workers=workers,
                on_event=self._usage_changed,
            )
            for cluster_scoped, external in kinds
            for resource in (cluster_scoped, namespaced(cluster_scoped))
        }

    def start(self) -> LocalProvider:
        install_crds(self.kube.api, load_crds() + load_crds(NAMESPACED_CRD_DIR))
        for controller in self.provider_configs.values():
            controller.start()
        for reconciler in self.reconcilers.values():
            reconciler.start()
        return self

    def stop(self) -> None:
        for reconciler in self.reconcilers.values():
            reconciler.stop()
        for controller in self.provider_configs.values():
            controller.stop()

    def synced(self) -> bool:
        informers = [r.informer for r in self.reconcilers.values()]
        informers += [c.informer for c in self.provider_configs.values()]
        return all(i.synced.is_set() for i in informers)

    def users(self, provider_config: ProviderConfigRef) -> int:
        return sum(
            provider_config_ref(obj) == provider_config
            for reconciler in self.reconcilers.values()
            for obj in reconciler.informer.items()
        )

    def _usage_changed(self, event: str, obj: dict[str, Any]) -> None:
        """Recount the provider config ``obj`` names, and the one it named before (a changed
        ``providerConfigRef`` leaves a user fewer there)."""
        meta = obj["metadata"]
        key = (obj["apiVersion"], obj["kind"], meta.get("namespace") or "", meta["name"])
        ref = provider_config_ref(obj)
        before = self._named.pop(key, None)
        if event != "DELETED":
            self._named[key] = ref
        changed = [ref] if before is None or before == ref else [ref, before]
        for named in changed:
            self.provider_configs[named.resource].queue.add(named)


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
    """ProviderConfig and ClusterProviderConfig ``name`` and their Secret
    ``<namespace>/<name>-postgresql`` for one server."""
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
    for resource in (PROVIDER_CONFIGS, CLUSTER_PROVIDER_CONFIGS):
        kube.apply(
            resource,
            {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
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
