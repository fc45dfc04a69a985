"""For the kubelet and Prometheus: liveness and the request counters, without a token."""

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bind_api.dependencies import Registry

router = APIRouter()


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/metrics")
def metrics(registry: Registry) -> Response:
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
