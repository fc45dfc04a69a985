"""The reconciler's HTTP surface: health, readiness, Prometheus metrics and webhooks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import uvicorn
from fastapi import FastAPI, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from klutch_gitops.serving import bounded_config, serve_in_thread
from reconciler.metrics import REGISTRY
from reconciler.webhooks import PullRequestEvent, PushEvent, webhook_router

WEBHOOK_BODY_BYTES = 25 * 1000 * 1000


def create_app(
    ready: Callable[[], Sequence[str]],
    secret_for: Callable[[frozenset[str]], Sequence[bytes]],
    on_push: Callable[[PushEvent], int],
    on_pull_request: Callable[[PullRequestEvent], int],
) -> FastAPI:
    """``ready`` returns what is not ready yet; empty means ready."""
    app = FastAPI(title="klutch-gitops reconciler", docs_url=None, redoc_url=None)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz() -> JSONResponse:
        waiting = list(ready())
        return JSONResponse(
            {"ready": not waiting, "waiting": waiting}, status_code=503 if waiting else 200
        )

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    app.include_router(webhook_router(secret_for, on_push, on_pull_request))
    return app


def serve(app: FastAPI, listen: str) -> uvicorn.Server:
    """Run ``app`` on ``host:port`` in a background thread; ``server.should_exit`` stops it.

    Requests get a receive deadline and header limit (``klutch_gitops.serving``); bodies are
    capped at GitHub's own webhook payload cap (25 MB, "About webhook events and payloads").
    """
    return serve_in_thread(
        bounded_config(
            app, listen, max_body_bytes=WEBHOOK_BODY_BYTES, log_level="warning", access_log=False
        ),
        "http",
    )
