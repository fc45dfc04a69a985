"""What the routes need, as FastAPI dependencies read from ``request.app.state``.

``bind_api.app.create_app`` fills the state once (config, Control Plane client, verifier,
metrics, and the browser flow's parts); the routers stay module-level and take what they use as
``Annotated`` parameters, so a test builds the app with fakes instead of patching modules.
Starlette's state is untyped, so each getter names the type of what it reads.
"""

from __future__ import annotations

from typing import Annotated, cast

from fastapi import Depends, Header, HTTPException, Request
from fastapi.templating import Jinja2Templates
from prometheus_client import CollectorRegistry, Counter

from bind_api.browser_login import BrowserLogin
from bind_api.config import BindApiConfig
from bind_api.ledger import SessionLedger
from bind_api.oidc import REFETCH_INTERVAL, IssuerUnavailable, Principal, TokenError
from klutch_gitops.kube.client import Kube

ISSUER_RETRY_AFTER = int(REFETCH_INTERVAL)  # seconds: how often the issuer's keys are retried


def get_config(request: Request) -> BindApiConfig:
    return cast(BindApiConfig, request.app.state.config)


def get_admin(request: Request) -> Kube:
    """The bind API's own identity on the Control Plane."""
    return cast(Kube, request.app.state.admin)


def get_registry(request: Request) -> CollectorRegistry:
    return cast(CollectorRegistry, request.app.state.registry)


def get_requests(request: Request) -> Counter:
    """``klutch_bind_requests_total`` by operation and outcome."""
    return cast(Counter, request.app.state.requests)


def get_caller(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    """The verified OIDC identity of a bearer token: 401 for any bad token, 503 with
    Retry-After while the issuer is unreachable, so nothing is changed unauthenticated."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise HTTPException(
            401,
            "missing bearer token: send Authorization: Bearer <ID token>",
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        return cast(Principal, request.app.state.verifier.verify(token.strip()))
    except IssuerUnavailable as error:
        raise HTTPException(
            503,
            "the identity provider is unreachable, so the token cannot be verified and "
            f"nothing was changed; try again when it is back: {error.message}",
            headers={"Retry-After": str(ISSUER_RETRY_AFTER)},
        ) from None
    except TokenError as error:
        raise HTTPException(
            401, error.message, headers={"WWW-Authenticate": 'Bearer error="invalid_token"'}
        ) from None


def get_login(request: Request) -> BrowserLogin:
    return cast(BrowserLogin, request.app.state.login)


def get_ledger(request: Request) -> SessionLedger:
    """The used bind sessions on the Control Plane: a replayed ``POST /bind`` binds nothing."""
    return cast(SessionLedger, request.app.state.ledger)


def get_pages(request: Request) -> Jinja2Templates:
    return cast(Jinja2Templates, request.app.state.pages)


Config = Annotated[BindApiConfig, Depends(get_config)]
Admin = Annotated[Kube, Depends(get_admin)]
Registry = Annotated[CollectorRegistry, Depends(get_registry)]
Requests = Annotated[Counter, Depends(get_requests)]
Caller = Annotated[Principal, Depends(get_caller)]
Login = Annotated[BrowserLogin, Depends(get_login)]
Ledger = Annotated[SessionLedger, Depends(get_ledger)]
Pages = Annotated[Jinja2Templates, Depends(get_pages)]
