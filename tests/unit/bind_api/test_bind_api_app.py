"""The app factory's wiring: which routers a bind API serves, and the answers that need no
Control Plane (health, metrics, a missing token, a refused body)."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from bind_api.app import create_app
from bind_api.config import BindApiConfig
from tests.unit.bind_api.test_oidc import (
    AUDIENCE,
    ISSUER,
    RSA,
    Clock,
    FakeIssuer,
    make_verifier,
    mint,
)

CONFIG = BindApiConfig(Path("unused.kubeconfig"), ISSUER, (AUDIENCE,))


def json_api() -> TestClient:
    """Without a browser login; no route here may reach the Control Plane (admin is None)."""
    return TestClient(create_app(CONFIG, None, make_verifier(FakeIssuer(RSA), Clock())))  # type: ignore[arg-type]


def test_health_and_metrics_need_no_token() -> None:
    api = json_api()
    assert api.get("/healthz").json() == {"status": "ok"}
    metrics = api.get("/metrics")
    assert metrics.status_code == 200
    assert "klutch_bind_requests_total" in metrics.text


def test_without_a_browser_login_the_browser_routes_are_not_served() -> None:
    api = json_api()
    for path in ("/export", "/authorize", "/callback", "/resources"):
        assert api.get(path).status_code == 404, path
    assert api.post("/bind").status_code == 404


def test_the_json_routes_need_a_bearer_token() -> None:
    answer = json_api().get("/api/v1/bindings")
    assert answer.status_code == 401
    assert answer.headers["WWW-Authenticate"] == "Bearer"
    assert answer.json() == {
        "detail": "missing bearer token: send Authorization: Bearer <ID token>"
    }


def test_a_refused_body_is_a_422_that_does_not_echo_its_input() -> None:
    kubeconfig = "apiVersion: v1\nusers: [{user: {token: SECRET-TOKEN}}]"
    answer = json_api().post(
        "/api/v1/bindings",
        json={"clusterId": "c", "apis": [], "appKubeconfig": kubeconfig},
        headers={"Authorization": f"Bearer {mint()}"},
    )
    assert answer.status_code == 422
    assert [e["loc"] for e in answer.json()["detail"]] == [
        ["body", "apis"],
        ["body", "appKubeconfig"],
    ]
    assert "SECRET-TOKEN" not in answer.text
