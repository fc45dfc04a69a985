"""``klutch-gitops dev run``: the whole product on the local stack, seeded from examples/repos.

Bare repositories made from ``examples/repos/`` stand in for a Git server; a consumer is bound for
the dev user the way the bind API does it; the reconciler follows the platform repository and
team-a's repository until interrupted.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from bind_api.consumer import bind_consumer, binder_kubeconfig, consumer_namespace
from klutch_gitops.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube import NAMESPACES, Kube, api_client
from klutch_gitops.localstack.processes import free_port
from klutch_gitops.localstack.stack import StackInfo
from reconciler.platform import TEMPLATE_NAMESPACE

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "repos"
TEAM = "team-a"


@dataclass(frozen=True)
class Demo:
    config: Path
    repositories: dict[str, Path]  # name -> bare repository
    listen: str
    bind_api_config: Path
    bind_api_url: str


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


def seed_repository(source: Path, remote: Path) -> None:
    """A bare repository holding ``source``'s files as its first commit; kept if it exists."""
    if remote.exists():
        return
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    with tempfile.TemporaryDirectory() as work:
        tree = Path(work) / "tree"
        shutil.copytree(source, tree)
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
    admin = Kube(api_client(Path(info.clusters["control-plane"].kubeconfig)))
    app = Kube(api_client(Path(info.clusters["app"].kubeconfig)))
    claim_crds = load_dev_claim_crds()
    install_crds(admin.api, load_crds(cluster="control-plane") + claim_crds)
    install_crds(app.api, load_crds(cluster="app"))
    app.apply(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": TEAM}})
    admin.apply(
        NAMESPACES,
        {
            "apiVersion": "v1",
            "kind": "Namespace",  # where templates live
            "metadata": {"name": TEMPLATE_NAMESPACE},
        },
    )

    repositories = {name: state / f"{name}.git" for name in ("platform", TEAM)}
    for name, remote in repositories.items():
        seed_repository(EXAMPLES / name, remote)

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
            {
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
            },
            sort_keys=False,
        )
    )
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
    return Demo(
        config=config,
        repositories=repositories,
        listen=listen,
        bind_api_config=bind_api_config,
        bind_api_url=bind_url,
    )
