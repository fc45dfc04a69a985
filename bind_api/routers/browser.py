"""Klutch's browser bind flow, compatible with ``kubectl bind URL`` and without its gaps.

1. ``GET /export``: the BindingProvider, naming ``/authorize`` as the place to log in.
2. ``GET /authorize?redirect_url=&session_id=&cluster_id=`` (or kube-bind's ``p``/``s``/``c``):
   remembers the CLI's loopback callback in an encrypted cookie together with a PKCE verifier
   and a nonce, and sends the browser to the issuer with a ``state`` signed by the bind API and
   bound to that cookie. Klutch sends the callback through the issuer as plain base64, so anyone
   could forge it; only loopback callbacks are accepted here, so a binding can never be sent to
   another host.
3. ``GET /callback``: checks ``state`` against the cookie, exchanges the code with the verifier,
   verifies the ID token (signature, issuer, audience, expiry) and its ``nonce``, and keeps the
   verified identity in a short-lived session cookie.
4. ``GET /resources``: a page of the APIs the person may bind (and why not the others).
5. ``POST /bind``: binds the chosen APIs at once (Klutch allows one per login) and redirects to
   the CLI's callback with ``?response=<base64 BindingResponse>``, as kube-bind's CLI expects.
   A session binds once: its use is recorded on the Control Plane (``bind_api.ledger``), so the
   same cookie and form replayed, on any replica, bind nothing.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from importlib.resources import files
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import Counter

from bind_api.bindings import BindingRequest, bind, find_templates
from bind_api.browser_flow import (
    LOGIN_COOKIE,
    LOGIN_SECONDS,
    SESSION_COOKIE,
    SESSION_SECONDS,
    FlowError,
    binding_provider,
    binding_response,
    cli_callback,
    response_url,
)
from bind_api.browser_login import BrowserLogin, complete_login
from bind_api.config import BindApiConfig
from bind_api.dependencies import Admin, Config, Ledger, Login, Pages, Requests
from bind_api.export_requests import export_request
from bind_api.ledger import SessionLedger
from bind_api.ownership import Refused
from bind_api.sessions import SessionError, fingerprint, same
from klutch_gitops.authz import may_bind
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import list_templates, offered
from klutch_gitops.kube.client import Kube
from klutch_gitops.oidc_client import authorization_url, new_pkce

log = logging.getLogger(__name__)

router = APIRouter()


def page_templates() -> Jinja2Templates:
    """The flow's HTML pages (bind_api/templates), every value autoescaped."""
    return Jinja2Templates(
        env=Environment(
            loader=FileSystemLoader(str(files("bind_api") / "templates")),
            autoescape=select_autoescape(default=True),
        )
    )


@router.get("/export")
def export(login: Login) -> JSONResponse:
    return JSONResponse(binding_provider(login.flow.external_url))


@router.get("/authorize", response_model=None)
def authorize(request: Request, login: Login, pages: Pages, requests: Requests) -> Response:
    try:
        redirect, session_id, cluster_id = cli_callback(dict(request.query_params))
        provider = login.provider()
    except FlowError as error:
        return _failed(request, pages, requests, error, "authorize")
    except KlutchError as error:
        return _failed(
            request, pages, requests, FlowError(503, error.message, error.fix), "authorize"
        )
    verifier, challenge = new_pkce()
    nonce, sid = secrets.token_urlsafe(24), secrets.token_urlsafe(32)
    state = login.codec.sign("state", {"login": fingerprint(sid)}, LOGIN_SECONDS)
    response = RedirectResponse(
        authorization_url(
            provider,
            login.flow.client_id,
            login.redirect_uri,
            " ".join(login.flow.scopes),
            state,
            nonce,
            challenge,
        ),
        status_code=302,
    )
    started = {
        "sid": sid,
        "verifier": verifier,
        "nonce": nonce,
        "redirect": redirect,
        "session_id": session_id,
        "cluster_id": cluster_id,
    }
    sealed = login.codec.seal("login", started, LOGIN_SECONDS)
    _cookie(login, response, LOGIN_COOKIE, sealed, LOGIN_SECONDS)
    requests.labels("authorize", "ok").inc()
    return response


@router.get("/callback", response_model=None)
def callback(request: Request, login: Login, pages: Pages, requests: Requests) -> Response:
    try:
        claims = complete_login(login, request)
    except FlowError as error:
        return _failed(request, pages, requests, error, "callback")
    response = RedirectResponse("resources", status_code=303)
    response.delete_cookie(LOGIN_COOKIE)
    sealed = login.codec.seal("session", claims, SESSION_SECONDS)
    _cookie(login, response, SESSION_COOKIE, sealed, SESSION_SECONDS)
    requests.labels("callback", "ok").inc()
    return response


@router.get("/resources", response_model=None)
def resources(
    request: Request, login: Login, config: Config, admin: Admin, pages: Pages, requests: Requests
) -> Response:
    try:
        claims = _session(login, request)
    except FlowError as error:
        return _failed(request, pages, requests, error, "resources")
    choices = []
    for api, template in sorted(offered(list_templates(admin)).items()):
        decision = may_bind(template, api, claims["groups"], config.default_allowed_groups)
        choices.append(
            {
                "api": api,
                "allowed": decision.allowed,
                "reason": decision.reason,
                "claims": [
                    claim.get("resource", "?")
                    for claim in template["spec"].get("permissionClaims") or []
                ],
            }
        )
    return pages.TemplateResponse(
        request,
        "resources.html",
        {
            "who": claims.get("email") or claims["sub"],
            "cluster": claims["cluster_id"],
            "choices": choices,
            "csrf": claims["csrf"],
        },
    )


@router.post("/bind", response_model=None)
def bind_apis(
    request: Request,
    login: Login,
    config: Config,
    admin: Admin,
    ledger: Ledger,
    pages: Pages,
    requests: Requests,
    csrf: Annotated[str, Form()] = "",
    api: Annotated[list[str] | None, Form()] = None,
) -> Response:
    try:
        claims = _session(login, request)
        if not same(csrf, claims["csrf"]):
            raise FlowError(
                403, "the form does not belong to this session", "reload the page and bind"
            )
        apis = list(dict.fromkeys(api or []))
        if not apis:
            raise FlowError(400, "no API chosen", "go back and tick at least one API")
        response = _bind(config, admin, ledger, claims, apis)
    except FlowError as error:
        return _failed(request, pages, requests, error, "bind")
    except KlutchError as error:
        status = error.status if isinstance(error, Refused) else 400
        return _failed(
            request, pages, requests, FlowError(status, error.message, error.fix), "bind"
        )
    redirect = RedirectResponse(response_url(claims["redirect"], response), status_code=303)
    redirect.delete_cookie(SESSION_COOKIE)  # one binding per login: a replay finds nothing
    requests.labels("bind", "ok").inc()
    return redirect


def _failed(
    request: Request, pages: Jinja2Templates, requests: Counter, error: FlowError, step: str
) -> HTMLResponse:
    """The page that says what happened and what to do; the login in progress is dropped."""
    requests.labels(step, "refused").inc()
    log.info("browser flow refused", extra={"step": step, "reason": error.message})
    response = pages.TemplateResponse(
        request,
        "message.html",
        {"message": error.message, "fix": error.fix},
        status_code=error.status,
    )
    response.delete_cookie(LOGIN_COOKIE)
    return response


def _cookie(login: BrowserLogin, response: Response, name: str, value: str, seconds: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=seconds,
        httponly=True,
        secure=login.secure_cookies,
        samesite="lax",  # sent on the issuer's top-level redirect back, not on cross-site POSTs
    )


def _session(login: BrowserLogin, request: Request) -> dict[str, Any]:
    try:
        return login.codec.open("session", request.cookies.get(SESSION_COOKIE))
    except SessionError as error:
        raise FlowError(
            401,
            f"no valid bind session: {error}",
            "start again from the CLI (kubectl bind / klutch-bind); a session lasts "
            f"{SESSION_SECONDS // 60} minutes",
        ) from None


def _bind(
    config: BindApiConfig,
    admin: Kube,
    ledger: SessionLedger,
    claims: Mapping[str, Any],
    apis: list[str],
) -> dict[str, Any]:
    """Authorise every API, use up the session, bind them as one, answer with the response."""
    templates = find_templates(admin, apis)
    refused = [
        decision.reason
        for name in apis
        if not (
            decision := may_bind(
                templates[name], name, claims["groups"], config.default_allowed_groups
            )
        ).allowed
    ]
    if refused:
        raise FlowError(403, "; ".join(refused), "ask the platform team for access")
    jti = claims.get("jti")
    if not isinstance(jti, str) or not jti:
        raise FlowError(
            401, "no valid bind session: it carries no ID", "start again from the CLI to bind"
        )
    if not ledger.use(jti, int(claims["exp"])):
        raise FlowError(
            409,
            "this bind session was already used, so this request bound nothing",
            "start again from the CLI (kubectl bind / klutch-bind) to bind again",
        )
    result = bind(
        admin,
        BindingRequest(
            identity=claims["sub"],
            cluster_id=claims["cluster_id"],
            apis=tuple(apis),
            groups=tuple(claims["groups"]),
            default_allowed_groups=tuple(config.default_allowed_groups),
        ),
        prefix=config.consumer_prefix,
        limit=config.bindings_per_identity,
    )
    log.info(
        "bound",
        extra={
            "subject": claims["sub"],
            "consumer": result.consumer_namespace,
            "apis": apis,
            "flow": "browser",
        },
    )
    return binding_response(
        claims["session_id"],
        f"{claims['iss']}/{claims['sub']}",
        result.kubeconfig,
        [export_request(result.consumer_namespace, templates[name]) for name in apis],
    )
