"""Dex down while someone binds: the bind API answers a clear 503 (what is down, that nothing
changed, when to retry), nothing of the binding exists on either cluster, and once Dex is back
the same bind succeeds.

Two ways a bind needs Dex: the bind API has never fetched its keys (it just started), or the
token is signed with a key Dex rotated to on a restart (its keys live in memory) and the bind API
must fetch it."""

from __future__ import annotations

import base64
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from bind_api.oidc import REFETCH_INTERVAL
from bind_api.server import build_server
from klutch_gitops.apis import REPOSITORY_BINDINGS
from klutch_gitops.consumer import consumer_namespace
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from tests.integration.bindapi import (
    API,
    bind_api_config,
    cli,
    dev_id_token,
    offered_api,
    serving,
    token_args,
)
from tests.kit.wait import eventually

from .conftest import Faults


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's header and payload, unverified (the test reads what Dex put there)."""
    header, payload = (
        json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
        for part in token.split(".")[:2]
    )
    return {**payload, "kid": header.get("kid")}


def bind(url: str, token: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{url}/api/v1/bindings",
        json=body,
        headers={"Authorization": f"Bearer {token}"},
        timeout=120,
    )


@pytest.mark.parametrize("bind_api_knows_dex", [False, True], ids=["fresh", "rotated-key"])
def test_binding_while_dex_is_down(
    bind_api_knows_dex: bool,
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    faults: Faults,
    tmp_path: Path,
) -> None:
    admin, app = Kube(clusters["control-plane"]), Kube(clusters["app"])
    app_kubeconfig = stack.clusters["app"].kubeconfig
    cluster_id, team = f"chaos-{uuid.uuid4().hex[:6]}", f"team-{uuid.uuid4().hex[:6]}"
    # Registered, never fetched here: a URL of its own is enough (tenants get https and ssh).
    url = f"https://git.example.com/chaos/{team}.git"
    repository = {"url": url, "appNamespaces": [team], "path": "claims"}
    body = {
        "clusterId": cluster_id,
        "apis": [API],
        "repository": repository,
        "appKubeconfig": Path(app_kubeconfig).read_text(),
    }
    token = dev_id_token(stack)
    consumer = consumer_namespace(claims_of(token)["sub"], cluster_id)

    def nothing_bound() -> None:
        assert admin.get(NAMESPACES, None, consumer) is None
        bindings, _ = admin.list(REPOSITORY_BINDINGS)
        assert not [b for b in bindings if b["spec"]["url"] == repository["url"]]
        assert app.get(SECRETS, "klutch-bind", f"{consumer}-kubeconfig") is None

    with offered_api(clusters, prefix="a-chaos"):
        if not bind_api_knows_dex:
            faults.kill("dex")
        with serving(build_server(bind_api_config(stack))) as url:
            if bind_api_knows_dex:
                listed = httpx.get(
                    f"{url}/api/v1/exports", headers={"Authorization": f"Bearer {token}"}
                )
                assert listed.status_code == 200, listed.text  # its keys are cached now
                known = time.monotonic()
                faults.kill("dex")
                faults.start("dex")  # Dex keeps keys in memory: it signs with a new one
                rotated = dev_id_token(stack)
                assert claims_of(rotated)["kid"] != claims_of(token)["kid"]
                token = rotated
                faults.kill("dex")
                # past the verifier's refetch rate limit: it must ask the issuer for the new key
                time.sleep(max(0.0, known + REFETCH_INTERVAL + 0.5 - time.monotonic()))

            refused = bind(url, token, body)
            assert refused.status_code == 503, refused.text
            assert int(refused.headers["Retry-After"]) > 0
            detail = refused.json()["detail"]
            assert detail.startswith("the identity provider is unreachable"), detail
            assert "nothing was changed; try again" in detail
            assert stack.dex.issuer in detail
            from_cli = cli(
                tmp_path,
                "bind", url, "--api", API, "--cluster-id", cluster_id, *token_args(tmp_path, token),
                "--repo", repository["url"], "--path", "claims", "--namespace", team,
                "--kubeconfig", app_kubeconfig, "--yes",
            )  # fmt: skip
            assert from_cli.returncode == 1
            assert "identity provider is unreachable" in from_cli.stderr
            assert "try again" in from_cli.stderr
            nothing_bound()

            faults.start("dex")
            token = dev_id_token(stack)
            # Retry-After says when: the failed key fetch is retried no sooner than that
            bound = eventually(
                lambda: (answer := bind(url, token, body)).status_code == 201 and answer,
                "the same bind to succeed",
                120,
            )
    result = bound.json()
    try:
        assert result["consumerNamespace"] == consumer
        assert result["phases"] == {API: "Succeeded"}
        assert admin.get(NAMESPACES, None, consumer) is not None
        binding = admin.get(REPOSITORY_BINDINGS, consumer, result["repositoryBinding"])
        assert binding is not None
        assert binding["spec"]["url"] == repository["url"]
    finally:
        admin.delete(NAMESPACES, None, consumer)
