"""The reconciler's HTTP surface: health, readiness, Prometheus metrics and webhooks.

The port takes webhooks from the internet, so what it tells strangers carries no tenant names:
``/readyz`` answers ready or not and how many things it waits for, ``/metrics`` hashes registration
and Secret names (``metrics.py``). A request that presents the reconciler's ``metricsToken`` as
``Authorization: Bearer TOKEN`` gets the reasons and the names; ``/registrations`` (every
registration's status, in the RepositoryBinding's shape) answers only such a request.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Sequence
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST

from klutch_gitops.serving import bounded_config, serve_in_thread
from reconciler.metrics import exposition
from reconciler.triggers import webhooks
from reconciler.triggers.webhook_events import Candidates, PullRequestEvent, PushEvent
from reconciler.triggers.webhooks import webhook_router


class Unauthorized(Exception):
    """An Authorization header that is not the metrics token."""


def authorized(header: str | None, token: bytes | None) -> bool:
    """Whether a request's ``Authorization`` header presents ``token``: False without a header
    (or without a token configured); Unauthorized for a header that presents another token."""
    if header is None or token is None:
        return False
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token):
        raise Unauthorized
    return True


def create_app(
    ready: Callable[[], Sequence[str]],
    candidates: Candidates,
    on_push: Callable[[PushEvent], int],
    on_pull_request: Callable[[PullRequestEvent], int],
    metrics_token: bytes | None = None,
    registrations: Callable[[], list[dict[str, Any]]] = list,
) -> FastAPI:
    """``ready`` returns what is not ready yet; empty means ready. ``metrics_token`` unlocks the
    names in ``/readyz`` and ``/metrics``, and ``/registrations``; without it they are never
    shown."""
    app = FastAPI(title="klutch-gitops reconciler", docs_url=None, redoc_url=None)

    @app.exception_handler(Unauthorized)
    def unauthorized(_request: Request, _error: Unauthorized) -> JSONResponse:
        return JSONResponse(
            {
                "error": "the bearer token is not the reconciler's metricsToken; send "
                "'Authorization: Bearer <metricsToken>', or no Authorization header for the "
                "answer without names"
            },
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    def readyz(request: Request) -> JSONResponse:
        names = authorized(request.headers.get("authorization"), metrics_token)
        waiting = list(ready())
        answer: dict[str, object] = {"ready": not waiting, "waiting": len(waiting)}
        if names:
            answer["reasons"] = waiting
        return JSONResponse(answer, status_code=503 if waiting else 200)

    @app.get("/metrics")
    def metrics(request: Request) -> Response:
        names = authorized(request.headers.get("authorization"), metrics_token)
        return Response(exposition(names), media_type=CONTENT_TYPE_LATEST)

    @app.get("/registrations")
    def registration_statuses(request: Request) -> JSONResponse:
        if not authorized(request.headers.get("authorization"), metrics_token):
            return JSONResponse(  # tenant names: for the metrics token only
                {"error": "send 'Authorization: Bearer <metricsToken>' for /registrations"},
                status_code=401,
                headers={"WWW-Authenticate": "Bearer"},
            )
        return JSONResponse({"registrations": registrations()})

    app.include_router(webhook_router(candidates, on_push, on_pull_request))
    return app


def serve(app: FastAPI, listen: str) -> uvicorn.Server:
    """Run ``app`` on ``host:port`` in a background thread; ``server.should_exit`` stops it.

    Requests get a receive deadline and header limit (``klutch_gitops.serving``); bodies are
    capped where the webhook router would refuse them anyway (``webhooks.MAX_BODY``), so no
    connection can make the server buffer more than that.
    """
    return serve_in_thread(
        bounded_config(
            app, listen, max_body_bytes=webhooks.MAX_BODY, log_level="warning", access_log=False
        ),
        "http",
    )
