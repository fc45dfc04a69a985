"""``klutch-gitops dev run``: the whole product on the local stack, seeded from examples/repos.

Bare repositories made from ``examples/repos/`` stand in for a Git server; the platform repository
gets the catalog (XRDs, the local-* Compositions, the templates) and is applied once, so that
Crossplane offers the claim kinds before a consumer is bound for the dev user with them, the way
the bind API does it; then the reconciler follows the platform repository and team-a's
repository until interrupted, and team-a's claims become a real database on the stack.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.apis import XRDS
from klutch_gitops.config_file import platform_from
from klutch_gitops.consumer import bind_consumer, binder_kubeconfig, consumer_namespace
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, api_client
from klutch_gitops.kube.crds import install_crds, load_crds
from klutch_gitops.kube.resources import CRDS, NAMESPACES
from reconciler.sync.platform import TEMPLATE_NAMESPACE, PlatformSync

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "repos"
TEAM = "team-a"
# What the platform repository publishes from the catalog: the local stack's backend.
CATALOG_PARTS = ("xrds", "compositions/local", "templates")
EXPORTED = ("postgresqlinstances", "servicebindings", "backups", "restores")
OFFER_TIMEOUT = 120.0


@dataclass(frozen=True)
class Demo:
    config: Path
    repositories: dict[str, Path]  # name -> bare repository
    listen: str
    bind_api_config: Path
    bind_api_url: str


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


def seed_repository(source: Path, remote: Path, extra: dict[str, Path] | None = None) -> None:
    """A bare repository holding ``source``'s files (and the ``extra`` folders, by their path in
    the repository) as its first commit; kept if it exists."""
    if remote.exists():
        return
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    with tempfile.TemporaryDirectory() as work:
        tree = Path(work) / "tree"
        shutil.copytree(source, tree)
        for target, folder in (extra or {}).items():
            shutil.copytree(folder, tree / target)
        _git(tree, "init", "-q", "-b", "main")
        _git(tree, "add", "-A")
        _git(
            tree,
            "-c",
            "user.name=klutch-gitops",
            "-c",
            "user.email=dev@klutch.example",
            "commit",
            "-q",
            "-m",
            f"seed from examples/repos/{source.name}",
        )
        _git(tree, "push", "-q", str(remote), "main")


def seed(info: StackInfo) -> Demo:
    """Everything the demo needs; safe to run again on the same stack."""
    state = Path(info.state_dir) / "demo"
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    admin = _prepare_clusters(info)
    repositories = {name: state / f"{name}.git" for name in ("platform", TEAM)}
    seed_repository(
        EXAMPLES / "platform",
        repositories["platform"],
        {f"catalog/{part}": ROOT / "catalog" / part for part in CATALOG_PARTS},
    )
    seed_repository(EXAMPLES / TEAM, repositories[TEAM])
    claim_crds = _offer_catalog(admin, repositories["platform"], state / "work" / "platform-seed")

    consumer = consumer_namespace(info.dex.email, "app")
    bind_consumer(admin, consumer, f"{info.dex.email}#app", claim_crds)
    binder = state / "binder.kubeconfig"
    binder.touch(mode=0o600)
    binder.write_text(yaml.safe_dump(binder_kubeconfig(admin, consumer)))
    webhook = state / "webhook-secret"
    if not webhook.exists():
        webhook.touch(mode=0o600)
        webhook.write_text(secrets.token_urlsafe(24))

    listen = f"127.0.0.1:{free_port()}"
    config = state / "reconciler.yaml"
    config.write_text(
        yaml.safe_dump(
            _reconciler_config(info, state, listen, repositories, consumer, binder, webhook),
            sort_keys=False,
        )
    )
    bind_api_config, bind_url = _write_bind_api_config(info, state)
    return Demo(
        config=config,
        repositories=repositories,
        listen=listen,
        bind_api_config=bind_api_config,
        bind_api_url=bind_url,
    )


def _prepare_clusters(info: StackInfo) -> Kube:
    """Our CRDs on both clusters, the team's App namespace and the templates' namespace; the
    Control Plane's admin client."""
    admin = Kube(api_client(Path(info.clusters["control-plane"].kubeconfig)))
    app = Kube(api_client(Path(info.clusters["app"].kubeconfig)))
    install_crds(admin.api, load_crds(cluster="control-plane"))
    install_crds(app.api, load_crds(cluster="app"))
    app.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    admin.apply(  # where the templates live
        NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEMPLATE_NAMESPACE}},
    )
    return admin


def _reconciler_config(
    info: StackInfo,
    state: Path,
    listen: str,
    repositories: dict[str, Path],
    consumer: str,
    binder: Path,
    webhook: Path,
) -> dict[str, Any]:
    """The reconciler's config: the platform repository and team-a's, bound as the dev user."""
    return {
        "controlPlane": {"kubeconfig": info.clusters["control-plane"].kubeconfig},
        "listen": listen,
        "pollInterval": "30s",
        "batchWindow": "1s",
        "workDir": str(state / "work"),
        "platform": {"url": f"file://{repositories['platform']}", "path": "."},
        "repositories": [
            {
                "name": TEAM,
                "url": f"file://{repositories[TEAM]}",
                "path": "claims",
                "consumerNamespace": consumer,
                "appNamespaces": [TEAM],
                "appCluster": {"kubeconfig": info.clusters["app"].kubeconfig},
                "controlPlane": {"kubeconfig": str(binder)},
                "webhookSecret": {"file": str(webhook)},
            }
        ],
    }


def _write_bind_api_config(info: StackInfo, state: Path) -> tuple[Path, str]:
    """The bind API's config with its secrets in files; the config's path and the API's URL."""
    bind_url = f"http://127.0.0.1:{info.bind_api_port}"  # Dex's klutch-bind-web redirects here
    web_secret, session_key = state / "bind-web-client-secret", state / "bind-session-key"
    for path, value in (
        (web_secret, info.dex.web_client_secret.encode()),
        (session_key, secrets.token_bytes(48)),
    ):
        path.touch(mode=0o600)
        path.write_bytes(value)
    bind_api_config = state / "bind-api.yaml"
    bind_api_config.write_text(
        yaml.safe_dump(
            {
                "controlPlane": {"kubeconfig": info.clusters["control-plane"].kubeconfig},
                "listen": f"127.0.0.1:{info.bind_api_port}",
                "oidc": {
                    "issuer": info.dex.issuer,
                    "ca": info.dex.ca,
                    "audiences": [info.dex.cli_client_id, info.dex.automation_client_id],
                },
                "browser": {
                    "externalURL": bind_url,
                    "clientId": info.dex.web_client_id,
                    "clientSecret": {"file": str(web_secret)},
                    "sessionKey": {"file": str(session_key)},
                },
                "defaultAllowedGroups": ["klutch-developers"],
            },
            sort_keys=False,
        )
    )
    return bind_api_config, bind_url


def _offer_catalog(admin: Kube, remote: Path, work: Path) -> list[dict[str, Any]]:
    """Apply the platform repository once, as the reconciler will, and wait until Crossplane
    offers the exported claim kinds; their claim CRDs are what the consumer binds."""
    PlatformSync(platform_from(f"file://{remote}"), admin, work, None).sync()
    deadline = time.monotonic() + OFFER_TIMEOUT
    while True:
        crds = [admin.get(CRDS, None, f"{plural}.anynines.com") for plural in EXPORTED]
        if all(_offered(admin, plural) for plural in EXPORTED) and all(crds):
            return [crd for crd in crds if crd is not None]
        if time.monotonic() > deadline:
            raise KlutchError(
                f"Crossplane did not offer {', '.join(EXPORTED)} in {OFFER_TIMEOUT:.0f}s",
                "check the crossplane log in the stack's logs directory",
            )
        time.sleep(0.5)


def _offered(admin: Kube, plural: str) -> bool:
    xrd = admin.get(XRDS, None, f"x{plural}.anynines.com") or {}
    conditions = {c["type"]: c["status"] for c in (xrd.get("status") or {}).get("conditions", [])}
    return conditions.get("Offered") == "True"
