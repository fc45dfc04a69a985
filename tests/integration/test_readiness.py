"""Readiness means "this replica can serve", not "every tenant is healthy": with leader election
on, one tenant's broken Secret leaves /readyz at 200, another tenant's push webhook is still
taken and applied, and the broken tenant's trouble is in its status (``GET /registrations``)."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
from dataclasses import replace

import httpx

from klutch_gitops.config import SecretRef
from klutch_gitops.kube.conditions import by_type
from reconciler.manager import Reconciler
from tests.conftest import TwinNamespace
from tests.env import Env
from tests.kit.claims import POSTGRES, claim
from tests.kit.tenant import WEBHOOK_SECRET
from tests.kit.wait import eventually

from .test_leader_election import settings
from .test_reconciler_modes import bare_repo, push

METRICS_TOKEN = "readiness-metrics-token-0123456789"


def test_a_broken_tenant_leaves_the_replica_ready_and_the_others_served(
    namespace: TwinNamespace, env: Env
) -> None:
    (env.tmp_path / "broken").mkdir()
    (env.tmp_path / "healthy").mkdir()
    broken = env.tenant(home=env.tmp_path / "broken", start=False)
    garbage = env.tmp_path / "broken-app.kubeconfig"
    garbage.write_text("this: is not a kubeconfig\n")
    broken_spec = replace(broken.spec, app_kubeconfig=SecretRef(file=garbage))

    # The healthy tenant's repository is on an https server polled once an hour: only the
    # webhook makes the reconciler fetch the push.
    healthy = env.tenant(home=env.tmp_path / "healthy", start=False)
    remote, clone = bare_repo(env.tmp_path, "healthy", env.git_server.root)
    push(clone, {"claims/first.yaml": claim("first", healthy.namespace)}, "first")
    url = env.git_server.url_of(remote)
    token = env.tmp_path / "metrics-token"
    token.write_text(METRICS_TOKEN)
    reconciler = Reconciler(
        replace(
            healthy.config,
            repositories=(broken_spec, replace(healthy.spec, url=url)),
            poll_interval=3600.0,
            leader_election=settings(namespace.name),
            metrics_token=SecretRef(file=token),
            work_dir=env.tmp_path / "work",
        )
    ).start()
    env.cleanup.append(reconciler.stop)
    base = f"http://{healthy.config.listen}"

    def mirrored(name: str) -> bool:
        return healthy.control_plane.get(POSTGRES, healthy.mapped, name) is not None

    eventually(lambda: mirrored("first"), "the healthy tenant's first claim", 60)
    bearer = {"Authorization": f"Bearer {METRICS_TOKEN}"}

    def ready() -> httpx.Response | None:
        answer = httpx.get(f"{base}/readyz", headers=bearer, timeout=5)
        return answer if answer.status_code == 200 else None

    answer = eventually(ready, "/readyz 200 beside a broken tenant", 60)
    assert answer.json() == {"ready": True, "waiting": 0, "reasons": []}

    shown = httpx.get(f"{base}/registrations", headers=bearer, timeout=5).json()
    statuses = {r["name"]: r for r in shown["registrations"]}
    found = by_type(statuses[broken_spec.name]["status"])
    assert (found["Ready"]["status"], found["Stalled"]["reason"]) == ("False", "SecretInvalid")
    assert statuses[broken_spec.name]["source"] == "config"
    assert by_type(statuses[healthy.spec.name]["status"])["Ready"]["status"] == "True"
    assert httpx.get(f"{base}/registrations", timeout=5).status_code == 401

    # the same, as a platform team sees its config file's registrations
    token = env.tmp_path / "metrics-token"
    token.write_text(METRICS_TOKEN)
    table = subprocess.run(
        [sys.executable, "-m", "klutch_gitops.cli", "get", "--reconciler", base,
         "--token-file", str(token)],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.splitlines()  # fmt: skip
    rows = {line.split()[0]: line.split()[1:3] for line in table[1:]}
    assert table[0].split()[:3] == ["NAME", "READY", "REASON"]
    assert rows[broken_spec.name] == ["False", "SecretInvalid"]
    assert rows[healthy.spec.name][0] == "True"

    after = push(clone, {"claims/second.yaml": claim("second", healthy.namespace)}, "second")
    body = json.dumps(
        {"ref": "refs/heads/main", "after": after, "repository": {"clone_url": url}}
    ).encode()
    signature = hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    hook = httpx.post(
        f"{base}/webhooks/gitea",
        content=body,
        headers={"X-Gitea-Event": "push", "X-Gitea-Signature": signature},
        timeout=10,
    )
    assert hook.status_code == 202, hook.text
    eventually(lambda: mirrored("second"), "the pushed claim, fetched on the webhook", 60)
    assert httpx.get(f"{base}/readyz", timeout=5).status_code == 200
