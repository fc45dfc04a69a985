"""What the reconciler's HTTP port tells a stranger and what it tells a scrape with the metrics
token: /readyz and /metrics through FastAPI's TestClient."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from klutch_gitops.config import SecretRef
from klutch_gitops.config_file import parse_config
from klutch_gitops.errors import KlutchError
from reconciler import metrics
from reconciler.server import authorized, create_app

TOKEN = b"metrics-token-0123456789"
REGISTRATION = "consumer-3f9a2c41d07e5b88a1.orders"  # a RepositoryBinding's: namespace.name
SECRET = "consumer-3f9a2c41d07e5b88a1/klutch-bind-kubeconfig"
WAITING = [f"repository {REGISTRATION}: git fetch failed for https://git.example/t/r"]


@pytest.fixture
def client() -> Iterator[TestClient]:
    metrics.CLAIMS.labels(REGISTRATION).set(2)
    metrics.BINDER_TOKEN_EXPIRY.labels(SECRET).set(1.0)
    app = create_app(lambda: WAITING, lambda urls: [], lambda e: 0, lambda e: 0, TOKEN)
    with TestClient(app) as test_client:
        yield test_client


def test_readyz_tells_a_stranger_only_whether_and_how_much(client: TestClient) -> None:
    response = client.get("/readyz")
    assert (response.status_code, response.json()) == (503, {"ready": False, "waiting": 1})
    assert "consumer-" not in response.text


def test_readyz_gives_the_reasons_for_the_token(client: TestClient) -> None:
    response = client.get("/readyz", headers={"Authorization": f"Bearer {TOKEN.decode()}"})
    assert response.status_code == 503
    assert response.json() == {"ready": False, "waiting": 1, "reasons": WAITING}


def test_metrics_hash_tenant_names_for_a_stranger(client: TestClient) -> None:
    text = client.get("/metrics").text
    assert "consumer-" not in text
    assert f'klutch_gitops_claims{{repository="{metrics.label_hash(REGISTRATION)}"}} 2.0' in text
    assert f'secret="{metrics.label_hash(SECRET)}"' in text


def test_metrics_name_registrations_for_the_token(client: TestClient) -> None:
    text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN.decode()}"}).text
    assert f'klutch_gitops_claims{{repository="{REGISTRATION}"}} 2.0' in text


@pytest.mark.parametrize("path", ["/metrics", "/readyz"])
@pytest.mark.parametrize("header", ["Bearer wrong", f"Basic {TOKEN.decode()}", "Bearer"])
def test_another_token_is_a_401_that_names_the_fix(
    client: TestClient, path: str, header: str
) -> None:
    response = client.get(path, headers={"Authorization": header})
    assert response.status_code == 401
    assert "metricsToken" in response.json()["error"]
    assert response.headers["WWW-Authenticate"] == "Bearer"
    assert "consumer-" not in response.text


def test_without_a_configured_token_no_header_unlocks_the_names() -> None:
    assert authorized(None, None) is False
    assert authorized("Bearer anything", None) is False
    assert authorized(f"Bearer {TOKEN.decode()}", TOKEN) is True


def test_the_hash_is_stable_and_short() -> None:
    assert metrics.label_hash("team-a") == metrics.label_hash("team-a")
    assert metrics.label_hash("team-a") != metrics.label_hash("team-b")
    assert len(metrics.label_hash("team-a")) == len("sha256:") + 16


def test_the_metrics_token_is_a_checked_reference(tmp_path: Path) -> None:
    base = "controlPlane: {kubeconfig: cp.kubeconfig}\n"
    config = parse_config(
        base + "metricsToken: {secretRef: {namespace: klutch, name: metrics, key: token}}\n",
        "c.yaml",
        tmp_path,
    )
    assert config.metrics_token == SecretRef(namespace="klutch", name="metrics", key="token")
    assert parse_config(base, "c.yaml", tmp_path).metrics_token is None
    with pytest.raises(KlutchError) as raised:
        parse_config(base + "metricsToken: {secretRef: {name: m, key: t}}\n", "c.yaml", tmp_path)
    assert "metricsToken.secretRef.namespace: is required" in raised.value.message
