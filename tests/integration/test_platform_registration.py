"""The platform repository is one registration among the others: a private one is polled and
fetched on a verified push webhook with its own credentials, and a repository named
``platform`` shares neither its poll state, its triggers nor its clone."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from wsgiref.simple_server import make_server

import httpx
import yaml
from kubernetes import client

from klutch_gitops.config import GitCredentialsRef, PlatformSpec, SecretRef
from klutch_gitops.config_file import platform_from
from klutch_gitops.kube.client import Kube, Resource
from reconciler.manager import Reconciler
from tests.env import Env
from tests.kit.claims import POSTGRES, claim
from tests.kit.wait import eventually

from .test_git_writeback import GitHttp, QuietHandler
from .test_reconciler_modes import bare_repo, never, push

TEMPLATES = Resource(
    "example-backend.klutch.anynines.com",
    "v1alpha1",
    "apiserviceexporttemplates",
    "APIServiceExportTemplate",
)
PASSWORD = "platform-pa55word"
HOOK_SECRET = "platform-hook-secret"


def template(name: str, namespace: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "example-backend.klutch.anynines.com/v1alpha1",
            "kind": "APIServiceExportTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"APIServiceSelector": {"group": "anynines.com", "resource": name}},
        }
    )


def mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def serve_private(root: Path, cleanup: list[Callable[[], Any]]) -> str:
    """The bare repositories under ``root`` over HTTP, readable by user ``bot`` only."""
    server = make_server("127.0.0.1", 0, GitHttp(root, "bot", PASSWORD), handler_class=QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    cleanup.append(lambda: (server.shutdown(), thread.join()))
    return f"http://127.0.0.1:{server.server_port}"


def namespace_on(clusters: dict[str, client.ApiClient], cleanup: list) -> str:
    name = f"platform-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(clusters["control-plane"])
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    cleanup.append(lambda: core.delete_namespace(name))
    return name


def private_platform(tmp_path: Path, cleanup: list, namespace: str) -> tuple[PlatformSpec, Path]:
    """A platform repository behind basic authentication, with one template; and its clone."""
    served = tmp_path / "served"
    served.mkdir(parents=True)
    remote, clone = bare_repo(tmp_path, "platform", root=served)
    push(clone, {"templates/first.yaml": template("first", namespace)}, "offer first")
    (tmp_path / "password").write_text(PASSWORD)
    (tmp_path / "hook").write_text(HOOK_SECRET)
    spec = platform_from(
        f"{serve_private(served, cleanup)}/{remote.name}",
        credentials=GitCredentialsRef(
            username="bot", password=SecretRef(file=tmp_path / "password")
        ),
        webhook_secret=SecretRef(file=tmp_path / "hook"),
    )
    return spec, clone


def gitea_push(listen: str, url: str, secret: str) -> httpx.Response:
    """A Gitea push delivery for ``url``'s main, signed with ``secret``."""
    body = json.dumps(
        {
            "ref": "refs/heads/main",
            "after": "0" * 39 + "1",
            "repository": {"clone_url": url, "html_url": url},
        }
    ).encode()
    return httpx.post(
        f"http://{listen}/webhooks/gitea",
        content=body,
        headers={
            "X-Gitea-Event": "push",
            "X-Gitea-Delivery": uuid.uuid4().hex,
            "Content-Type": "application/json",
            "X-Gitea-Signature": hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        },
    )


def test_a_private_platform_repository_is_polled_with_its_credentials(env: Env) -> None:
    admin = Kube(env.clusters["control-plane"])
    namespace = namespace_on(env.clusters, env.cleanup)
    spec, clone = private_platform(env.tmp_path, env.cleanup, namespace)
    reconciler = Reconciler(env.config(platform=spec)).start(serve_http=False)
    env.cleanup.append(reconciler.stop)
    eventually(lambda: admin.get(TEMPLATES, namespace, "first"), "the first template")

    push(clone, {"templates/second.yaml": template("second", namespace)}, "offer second")
    eventually(lambda: admin.get(TEMPLATES, namespace, "second"), "the polled template")


def test_a_push_webhook_fetches_the_platform_repository(env: Env) -> None:
    admin = Kube(env.clusters["control-plane"])
    namespace = namespace_on(env.clusters, env.cleanup)
    spec, clone = private_platform(env.tmp_path, env.cleanup, namespace)
    config = env.config(platform=spec, poll_interval=3600.0)
    reconciler = Reconciler(config).start()
    env.cleanup.append(reconciler.stop)
    eventually(lambda: admin.get(TEMPLATES, namespace, "first"), "the first template")

    push(clone, {"templates/second.yaml": template("second", namespace)}, "offer second")
    wrong = gitea_push(config.listen, spec.url, "not-the-secret")
    assert wrong.status_code == 401, wrong.text
    never(lambda: admin.get(TEMPLATES, namespace, "second"), "a fetch without a webhook", 2.0)
    answer = gitea_push(config.listen, spec.url, HOOK_SECRET)
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"triggered": 1}
    eventually(lambda: admin.get(TEMPLATES, namespace, "second"), "the pushed template")


def test_a_repository_named_platform_and_the_platform_repository_both_sync(env: Env) -> None:
    admin = Kube(env.clusters["control-plane"])
    namespace = namespace_on(env.clusters, env.cleanup)
    platform, platform_clone = private_platform(env.tmp_path / "p", env.cleanup, namespace)
    tenant = env.tenant(home=mkdir(env.tmp_path / "t"), start=False)
    env.cleanup.append(lambda: tenant.control_plane.delete(POSTGRES, tenant.mapped, "db"))
    # the tenant's repository carries a template too: the platform sync must never read it
    tenant.push(
        {
            "claims/db.yaml": claim("db", tenant.namespace),
            "claims/sneaky.yaml": template("sneaky", namespace),
        }
    )
    repository = replace(tenant.config.repositories[0], name="platform")
    config = replace(tenant.config, repositories=(repository,), platform=platform)
    reconciler = Reconciler(config).start(serve_http=False)
    env.cleanup.append(reconciler.stop)

    eventually(lambda: admin.get(TEMPLATES, namespace, "first"), "the platform's template")
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db"), "the claim")
    tenant.push({"claims/db2.yaml": claim("db2", tenant.namespace)}, "a second claim")
    env.cleanup.append(lambda: tenant.control_plane.delete(POSTGRES, tenant.mapped, "db2"))
    push(platform_clone, {"templates/second.yaml": template("second", namespace)}, "second")
    eventually(lambda: tenant.control_plane.get(POSTGRES, tenant.mapped, "db2"), "the new claim")
    eventually(lambda: admin.get(TEMPLATES, namespace, "second"), "the platform's new template")
    never(lambda: admin.get(TEMPLATES, namespace, "sneaky"), "the tenant's template applied")
