"""The bind API's app factory: its state, its routers, and how errors are answered.

Every request is authenticated by ``OIDCVerifier`` (401 for any bad token; 503 with Retry-After
when the issuer is unreachable, before anything is changed), every binding is authorised per API
by the caller's groups (403 with the reason), and a caller only ever sees and deletes their own
bindings: a consumer namespace belongs to the OIDC subject recorded in its identity annotation.
The routes are ``bind_api.routers``; what they need comes from ``bind_api.dependencies``.
"""

from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, Counter

from bind_api.browser_login import BrowserLogin
from bind_api.config import BindApiConfig
from bind_api.ledger import SessionLedger
from bind_api.oidc import OIDCVerifier
from bind_api.ownership import Refused
from bind_api.routers import api, browser, ops
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube


def create_app(
    config: BindApiConfig,
    admin: Kube,
    verifier: OIDCVerifier,
    login: BrowserLogin | None = None,
) -> FastAPI:
    """The JSON API, and Klutch's browser flow when ``login`` is given."""
    app = FastAPI(title="klutch-gitops bind API", docs_url=None, redoc_url=None)
    app.state.config, app.state.admin, app.state.verifier = config, admin, verifier
    app.state.registry = CollectorRegistry()
    app.state.requests = Counter(
        "klutch_bind_requests_total",
        "Bind API requests by outcome",
        ["operation", "outcome"],
        registry=app.state.registry,
    )
    # Starlette types a handler as taking any Exception; each is only called with its own class.
    app.add_exception_handler(RequestValidationError, invalid_request)  # type: ignore[arg-type]
    app.add_exception_handler(KlutchError, klutch_error)  # type: ignore[arg-type]
    app.include_router(ops.router)
    app.include_router(api.router)
    if login is not None:
        app.state.login = login
        app.state.ledger = SessionLedger(admin, login.flow.session_namespace)
        app.state.pages = browser.page_templates()
        app.include_router(browser.router)
    return app


def invalid_request(_request: Any, error: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 without the ``input`` it echoes: that may be a whole kubeconfig, or a
    password, which must not travel back into a proxy's or CLI's logs."""
    detail = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in error.errors()]
    return JSONResponse({"detail": detail}, status_code=422)


def klutch_error(_request: Any, error: KlutchError) -> JSONResponse:
    """A refusal with its status; any other KlutchError is a 400. Both say what to fix."""
    status = error.status if isinstance(error, Refused) else 400
    return JSONResponse({"error": error.message, "fix": error.fix}, status_code=status)
