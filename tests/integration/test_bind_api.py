"""The bind API's JSON interface with real Dex tokens against the real Control Plane."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from bind_api.app import create_app
from bind_api.config import BindApiConfig
from bind_api.oidc import OIDCVerifier
from klutch_gitops.apis import TEMPLATES
from klutch_gitops.authz import ALLOWED_GROUPS_ANNOTATION
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import NAMESPACES
from tests.kit.wait import eventually

from .dexflows import password_grant


@pytest.fixture(scope="module")
def id_token(oidc: httpx.Client, discovery: dict, stack: StackInfo) -> str:
    response = password_grant(oidc, discovery, stack)
    response.raise_for_status()
    return response.json()["id_token"]


@pytest.fixture
def api(stack: StackInfo, clusters) -> Iterator[tuple[TestClient, Kube, str]]:
    """The bind API in-process, and a template namespace holding two templates of this test."""
    admin = Kube(clusters["control-plane"])
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    namespace = f"templates-{uuid.uuid4().hex[:6]}"
    admin.apply(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    for resource, plural, groups in (
        (TEMPLATES[0], "postgresqlinstances", "team-a"),
        (TEMPLATES[1], "servicebindings", "dbas-only"),
    ):
        admin.apply(
            resource,
            {
                "apiVersion": resource.api_version,
                "kind": resource.kind,
                "metadata": {
                    "name": plural,
                    "namespace": namespace,
                    "annotations": {ALLOWED_GROUPS_ANNOTATION: groups},
                },
                "spec": {"APIServiceSelector": {"group": "anynines.com", "resource": plural}},
            },
        )
    config = BindApiConfig(
        control_plane_kubeconfig=Path(stack.clusters["control-plane"].kubeconfig),
        issuer=stack.dex.issuer,
        audiences=(stack.dex.automation_client_id,),
        issuer_ca=Path(stack.dex.ca),
    )
    verifier = OIDCVerifier(config.issuer, config.audiences, ca=config.issuer_ca)
    with TestClient(create_app(config, admin, verifier)) as client:
        yield client, admin, namespace
    admin.delete(NAMESPACES, None, namespace)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_required_and_verified(api, id_token: str) -> None:
    client, _, _ = api
    assert client.get("/healthz").status_code == 200
    missing = client.get("/api/v1/exports")
    assert missing.status_code == 401
    assert "bearer token" in missing.json()["detail"]
    header, payload, signature = id_token.split(".")
    forged = client.get("/api/v1/exports", headers=bearer(f"{header}.{payload}x.{signature}"))
    assert forged.status_code == 401
    unsigned = client.get("/api/v1/exports", headers=bearer("eyJhbGciOiJub25lIn0." + payload + "."))
    assert unsigned.status_code == 401
    assert "none" in unsigned.json()["detail"]


def test_exports_say_what_the_caller_may_bind(api, id_token: str) -> None:
    client, _, _ = api
    response = client.get("/api/v1/exports", headers=bearer(id_token))
    assert response.status_code == 200, response.text
    exports = {e["api"]: e for e in response.json()["exports"]}
    assert exports["postgresqlinstances.anynines.com"]["allowed"] is True  # dev user in team-a
    refused = exports["servicebindings.anynines.com"]
    assert refused["allowed"] is False
    assert "dbas-only" in refused["reason"]


def test_bind_is_authorised_idempotent_listed_and_removed(api, id_token: str) -> None:
    client, admin, _ = api
    cluster = f"app-{uuid.uuid4().hex[:6]}"
    forbidden = client.post(
        "/api/v1/bindings",
        headers=bearer(id_token),
        json={"clusterId": cluster, "apis": ["servicebindings.anynines.com"]},
    )
    assert forbidden.status_code == 403
    assert "only members of dbas-only" in forbidden.json()["detail"]
    unknown = client.post(
        "/api/v1/bindings",
        headers=bearer(id_token),
        json={"clusterId": cluster, "apis": ["redis.example.com"]},
    )
    assert unknown.status_code == 400
    assert "no APIServiceExportTemplate offers redis.example.com" in unknown.json()["error"]

    body = {"clusterId": cluster, "apis": ["postgresqlinstances.anynines.com"]}
    first = client.post("/api/v1/bindings", headers=bearer(id_token), json=body)
    assert first.status_code == 201, first.text
    second = client.post("/api/v1/bindings", headers=bearer(id_token), json=body)
    consumer = first.json()["consumerNamespace"]
    assert second.json()["consumerNamespace"] == consumer
    assert first.json()["phases"] == {"postgresqlinstances.anynines.com": "Succeeded"}
    assert "token" in first.json()["kubeconfig"]

    listed = client.get("/api/v1/bindings", headers=bearer(id_token)).json()["bindings"]
    assert any(b["consumerNamespace"] == consumer and b["clusterId"] == cluster for b in listed)

    assert (
        client.delete("/api/v1/bindings/kube-system", headers=bearer(id_token)).status_code == 404
    )  # not the caller's
    assert client.get("/api/v1/bindings/kube-system", headers=bearer(id_token)).status_code == 404
    planned = client.get(f"/api/v1/bindings/{consumer}", headers=bearer(id_token)).json()
    assert (planned["namespaces"], planned["claims"]) == ([consumer], [])
    deleting = client.delete(f"/api/v1/bindings/{consumer}", headers=bearer(id_token))
    assert deleting.status_code == 202, deleting.text  # accepted: the client polls until gone
    assert deleting.json()["namespaces"] == [consumer]
    eventually(lambda: admin.get(NAMESPACES, None, consumer) is None, "the consumer to go")
    gone = client.get(f"/api/v1/bindings/{consumer}", headers=bearer(id_token))
    assert gone.status_code == 404


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("https://bot:s3cret@git.example.com/team/claims", "carries credentials"),
        ("team claims", "holds whitespace"),
    ],
)
def test_a_repository_url_is_checked_before_anything_is_bound(
    api, id_token: str, url: str, message: str
) -> None:
    client, _, _ = api
    cluster = f"app-{uuid.uuid4().hex[:6]}"
    refused = client.post(
        "/api/v1/bindings",
        headers=bearer(id_token),
        json={
            "clusterId": cluster,
            "apis": ["postgresqlinstances.anynines.com"],
            "repository": {"url": url, "appNamespaces": ["team-a"]},
            "appKubeconfig": "apiVersion: v1\nkind: Config\n",
        },
    )
    assert refused.status_code == 422
    assert message in json.dumps(refused.json())
    listed = client.get("/api/v1/bindings", headers=bearer(id_token)).json()["bindings"]
    assert not any(b["clusterId"] == cluster for b in listed)
