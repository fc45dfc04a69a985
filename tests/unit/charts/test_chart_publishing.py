"""charts/klutch-gitops publishes the bind API and the reconciler's push webhooks through an
Ingress or a Gateway API HTTPRoute, and nothing else: every route the bind API serves to people
and every webhook path reach their Service, while /metrics, /readyz, /healthz and /registrations
match no published path, checked against the routes the real FastAPI apps declare."""

from __future__ import annotations

import re

import pytest
from fastapi import APIRouter, FastAPI

from bind_api.routers import api, browser, ops
from reconciler.server import create_app
from tests.helm import VALUE_SETS, render

COMPONENTS = ("reconciler", "bind-api")


def by_component(docs: list[dict], kind: str) -> dict[str, dict]:
    return {
        doc["metadata"]["labels"]["app.kubernetes.io/component"]: doc
        for doc in docs
        if doc["kind"] == kind
    }


def matches(prefix: str, path: str) -> bool:
    """Ingress `Prefix` and HTTPRoute `PathPrefix` matching: whole path elements, so /bind
    matches /bind and /bind/x but not /bindings (kubernetes.io/docs/concepts/services-networking/
    ingress/#examples; gateway-api apis/v1/httproute_types.go, PathMatchPathPrefix)."""
    elements = [e for e in prefix.split("/") if e]
    return [e for e in path.split("/") if e][: len(elements)] == elements


def concrete(path: str) -> str:
    """A request path for a route template: /bindings/{consumer} -> /bindings/x."""
    return re.sub(r"\{[^}]+\}", "x", path)


def route_paths(app: FastAPI) -> set[str]:
    """Every path the app serves (its OpenAPI paths: FastAPI lists included routers there)."""
    return {concrete(path) for path in app.openapi()["paths"]}


def router_paths(router: APIRouter) -> set[str]:
    app = FastAPI()
    app.include_router(router)
    return route_paths(app)


def reconciler_paths() -> set[str]:
    return route_paths(create_app(list, lambda *_: [], lambda _: 0, lambda _: 0))


PUBLIC = {
    "bind-api": router_paths(api.router) | router_paths(browser.router),
    "reconciler": {p for p in reconciler_paths() if p.startswith("/webhooks/")},
}
PRIVATE = {
    "bind-api": router_paths(ops.router) | {"/openapi.json", "/docs"},
    "reconciler": reconciler_paths() - PUBLIC["reconciler"],
}


def test_the_apps_have_public_and_private_routes() -> None:
    assert {"/api/v1/bindings/x", "/export", "/callback"} <= PUBLIC["bind-api"]
    assert PUBLIC["reconciler"] == {"/webhooks/x"}
    assert {"/metrics", "/healthz"} <= PRIVATE["bind-api"]
    assert {"/metrics", "/readyz", "/healthz", "/registrations"} <= PRIVATE["reconciler"]


def ingress_prefixes(ingress: dict) -> set[tuple[str, str]]:
    return {
        (path["path"], path["pathType"])
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    }


def assert_publishes_only_the_public_paths(component: str, prefixes: set[str]) -> None:
    for path in PUBLIC[component]:
        assert any(matches(prefix, path) for prefix in prefixes), (component, path)
    for path in PRIVATE[component]:
        assert not any(matches(prefix, path) for prefix in prefixes), (component, path)


@pytest.mark.parametrize("component", COMPONENTS)
def test_ingresses_publish_only_the_public_paths(component: str) -> None:
    docs = render([VALUE_SETS["ingress"]])
    ingress = by_component(docs, "Ingress")[component]
    service = by_component(docs, "Service")[component]
    prefixes = ingress_prefixes(ingress)
    assert {kind for _, kind in prefixes} == {"Prefix"}
    assert_publishes_only_the_public_paths(component, {path for path, _ in prefixes})
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            assert path["backend"]["service"] == {
                "name": service["metadata"]["name"],
                "port": {"number": service["spec"]["ports"][0]["port"]},
            }
    spec = ingress["spec"]
    assert spec["ingressClassName"] == "nginx"
    [host] = [rule["host"] for rule in spec["rules"]]
    [tls] = spec["tls"]
    assert tls["hosts"] == [host]
    assert ingress["metadata"]["annotations"]["cert-manager.io/cluster-issuer"] == "letsencrypt"


def test_the_bind_api_serving_tls_tells_the_ingress_controller() -> None:
    ingress = by_component(render([VALUE_SETS["ingress"]]), "Ingress")["bind-api"]
    annotations = ingress["metadata"]["annotations"]
    assert annotations["nginx.ingress.kubernetes.io/backend-protocol"] == "HTTPS"


@pytest.mark.parametrize("component", COMPONENTS)
def test_http_routes_publish_only_the_public_paths(component: str) -> None:
    docs = render([VALUE_SETS["gateway"]])
    route = by_component(docs, "HTTPRoute")[component]
    service = by_component(docs, "Service")[component]
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    spec = route["spec"]
    assert spec["parentRefs"] == [
        {"name": "public", "namespace": "gateway-system", "sectionName": "https"}
    ]
    assert spec["hostnames"] == [
        "bind.example.com" if component == "bind-api" else "hooks.example.com"
    ]
    [rule] = spec["rules"]
    assert rule["backendRefs"] == [
        {"name": service["metadata"]["name"], "port": service["spec"]["ports"][0]["port"]}
    ]
    assert {m["path"]["type"] for m in rule["matches"]} == {"PathPrefix"}
    assert_publishes_only_the_public_paths(component, {m["path"]["value"] for m in rule["matches"]})


def test_nothing_is_published_by_default_and_a_host_is_optional() -> None:
    docs = render([VALUE_SETS["default"]])
    assert not by_component(docs, "Ingress")
    assert not by_component(docs, "HTTPRoute")
    docs = render([VALUE_SETS["default"]], set_values=["reconciler.ingress.enabled=true"])
    [rule] = by_component(docs, "Ingress")["reconciler"]["spec"]["rules"]
    assert "host" not in rule  # any host
    assert "bind-api" not in by_component(docs, "Ingress")


def test_a_disabled_component_is_not_published() -> None:
    docs = render([VALUE_SETS["ingress"]], set_values=["reconciler.enabled=false"])
    assert set(by_component(docs, "Ingress")) == {"bind-api"}
