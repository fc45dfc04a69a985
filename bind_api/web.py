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

import base64
import json
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.resources import files
from typing import Annotated, Any
from urllib.parse import urlencode

import httpx
from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from jinja2 import Environment, FileSystemLoader, select_autoescape
from prometheus_client import Counter

from bind_api import inputs
from bind_api.bindings import BindingRequest, Refused, bind, export_request, find_templates
from bind_api.config import BindApiConfig, BrowserFlow
from bind_api.ledger import SessionLedger
from bind_api.oidc import IssuerUnavailable, OIDCVerifier, TokenError
from bind_api.sessions import SessionCodec, SessionError, fingerprint, same
from klutch_gitops.authz import may_bind
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import list_templates, offered
from klutch_gitops.oidc_client import Provider, authorization_url, discover, new_pkce

log = logging.getLogger(__name__)

# Klutch's wire types (anynines/klutchio bind/pkg/apis/bind/v1alpha1/register.go): the
# BindingProvider carries the bare GroupVersion ("v1alpha1"), which kubectl-bind's bind.go compares
# with ``provider.APIVersion``; the BindingResponse and its requests carry the group too
# (SchemeGroupVersion), which the CLI's decoder and bind.go check.
PROVIDER_API_VERSION = "v1alpha1"
API_VERSION = "klutch.anynines.com/v1alpha1"
# The bind protocol this API speaks: Klutch's at v1.5.0. kubectl-bind's authenticate.go
# (validateProviderVersion) refuses a provider version that is empty or below v0.3.0, and
# klutch-gitops' own version (0.x) is not a bind protocol version.
PROTOCOL_VERSION = "v1.5.0"
LOGIN_COOKIE = "klutch_bind_login"
SESSION_COOKIE = "klutch_bind_session"
LOGIN_SECONDS = 600  # from /authorize to /callback: the time to type a password
SESSION_SECONDS = 900  # from /callback to /bind: the time to choose APIs


@dataclass
class BrowserLogin:
    """What the flow needs at run time: its config, keys, a verifier and an HTTP client."""

    flow: BrowserFlow
    client_secret: str
    codec: SessionCodec
    verifier: OIDCVerifier  # audience: the bind API's own client ID
    http: httpx.Client
    issuer: str
    _provider: Provider | None = None

    def provider(self) -> Provider:
        """The issuer's endpoints, discovered once (a KlutchError while it is unreachable)."""
        if self._provider is None:
            self._provider = discover(self.http, self.issuer)
        return self._provider

    @property
    def redirect_uri(self) -> str:
        return f"{self.flow.external_url}/callback"

    @property
    def secure_cookies(self) -> bool:
        return self.flow.external_url.startswith("https://")


class FlowError(Exception):
    """Ends a browser step with a page that says what happened and what to do."""

    def __init__(self, status: int, message: str, fix: str) -> None:
        super().__init__(message)
        self.status, self.message, self.fix = status, message, fix


# -- pure decisions ---------------------------------------------------------------------------


def binding_provider(external_url: str) -> dict[str, Any]:
    """What ``GET /export`` answers, field for field as Klutch's example-backend's handler.go."""
    return {
        "apiVersion": PROVIDER_API_VERSION,
        "kind": "BindingProvider",
        "providerPrettyName": "klutch-gitops",
        "version": PROTOCOL_VERSION,
        "authenticationMethods": [
            {
                "method": "OAuth2CodeGrant",
                "oauth2CodeGrant": {"authenticatedURL": f"{external_url}/authorize"},
            }
        ],
    }


def cli_callback(params: Mapping[str, str]) -> tuple[str, str, str]:
    """The CLI's loopback callback URL, its session ID and the App Cluster ID from /authorize.

    Accepts kubectl-bind's long names and its short ones (``p`` is the callback port). The
    callback must match ``inputs.CALLBACK`` whole and is rebuilt from its parts, so no spelling
    that another parser reads as another host ever reaches a redirect.
    """
    redirect = params.get("redirect_url")
    session_id = params.get("session_id") or params.get("s") or ""
    cluster_id = params.get("cluster_id") or params.get("c") or ""
    missing = [
        name
        for name, value in (
            ("redirect_url", redirect or params.get("p")),
            ("session_id", session_id),
            ("cluster_id", cluster_id),
        )
        if not value
    ]
    if missing:
        raise FlowError(
            400,
            f"/authorize needs {', '.join(missing)}",
            "open the URL the CLI printed (kubectl bind / klutch-bind), not /authorize itself",
        )
    try:
        if redirect:
            redirect = inputs.loopback_callback(redirect)
        else:
            redirect = f"http://localhost:{inputs.port(params['p'], 'p')}/callback"
        inputs.session_id(session_id, "session_id" if "session_id" in params else "s")
        inputs.cluster_id(cluster_id, "cluster_id" if "cluster_id" in params else "c")
    except ValueError as error:
        fix = inputs.CALLBACK_FIX if "callback" in str(error) else "start again from the CLI"
        raise FlowError(400, str(error), fix) from None
    return redirect, session_id, cluster_id


def binding_response(
    session_id: str, identity: str, kubeconfig: str, requests: list[dict[str, Any]]
) -> dict[str, Any]:
    """Klutch's BindingResponse; ``kubeconfig`` is bytes on the wire, so base64 in JSON."""
    return {
        "apiVersion": API_VERSION,
        "kind": "BindingResponse",
        "authentication": {"oauth2CodeGrant": {"sid": session_id, "id": identity}},
        "kubeconfig": base64.b64encode(kubeconfig.encode()).decode(),
        "requests": requests,
    }


def response_url(redirect: str, response: Mapping[str, Any]) -> str:
    encoded = base64.b64encode(json.dumps(response).encode()).decode()
    separator = "&" if "?" in redirect else "?"
    return f"{redirect}{separator}{urlencode({'response': encoded})}"


# -- the router -------------------------------------------------------------------------------


def browser_router(
    config: BindApiConfig, admin: Any, login: BrowserLogin, requests: Counter
) -> APIRouter:
    router = APIRouter()
    ledger = SessionLedger(admin, login.flow.session_namespace)
    pages = Jinja2Templates(
        env=Environment(
            loader=FileSystemLoader(str(files("bind_api") / "templates")),
            autoescape=select_autoescape(default=True),
        )
    )

    def page(request: Request, status: int, message: str, fix: str) -> HTMLResponse:
        return pages.TemplateResponse(
            request, "message.html", {"message": message, "fix": fix}, status_code=status
        )

    def failed(request: Request, error: FlowError, step: str) -> HTMLResponse:
        requests.labels(step, "refused").inc()
        log.info("browser flow refused", extra={"step": step, "reason": error.message})
        response = page(request, error.status, error.message, error.fix)
        response.delete_cookie(LOGIN_COOKIE)
        return response

    def cookie(response: Response, name: str, value: str, seconds: int) -> None:
        response.set_cookie(
            name,
            value,
            max_age=seconds,
            httponly=True,
            secure=login.secure_cookies,
            samesite="lax",  # sent on the issuer's top-level redirect back, not on cross-site POSTs
        )

    def session(request: Request) -> dict[str, Any]:
        try:
            return login.codec.open("session", request.cookies.get(SESSION_COOKIE))
        except SessionError as error:
            raise FlowError(
                401,
                f"no valid bind session: {error}",
                "start again from the CLI (kubectl bind / klutch-bind); a session lasts "
                f"{SESSION_SECONDS // 60} minutes",
            ) from None

    @router.get("/export")
    def export() -> JSONResponse:
        return JSONResponse(binding_provider(login.flow.external_url))

    @router.get("/authorize", response_model=None)
    def authorize(request: Request) -> Response:
        try:
            redirect, session_id, cluster_id = cli_callback(dict(request.query_params))
            provider = login.provider()
        except FlowError as error:
            return failed(request, error, "authorize")
        except KlutchError as error:
            return failed(request, FlowError(503, error.message, error.fix), "authorize")
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
        cookie(
            response,
            LOGIN_COOKIE,
            login.codec.seal(
                "login",
                {
                    "sid": sid,
                    "verifier": verifier,
                    "nonce": nonce,
                    "redirect": redirect,
                    "session_id": session_id,
                    "cluster_id": cluster_id,
                },
                LOGIN_SECONDS,
            ),
            LOGIN_SECONDS,
        )
        requests.labels("authorize", "ok").inc()
        return response

    @router.get("/callback", response_model=None)
    def callback(request: Request) -> Response:
        try:
            claims = _complete_login(login, request)
        except FlowError as error:
            return failed(request, error, "callback")
        response = RedirectResponse("resources", status_code=303)
        response.delete_cookie(LOGIN_COOKIE)
        cookie(
            response,
            SESSION_COOKIE,
            login.codec.seal("session", claims, SESSION_SECONDS),
            SESSION_SECONDS,
        )
        requests.labels("callback", "ok").inc()
        return response

    @router.get("/resources", response_model=None)
    def resources(request: Request) -> Response:
        try:
            claims = session(request)
        except FlowError as error:
            return failed(request, error, "resources")
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
        csrf: Annotated[str, Form()] = "",
        api: Annotated[list[str] | None, Form()] = None,
    ) -> Response:
        try:
            claims = session(request)
            if not same(csrf, claims["csrf"]):
                raise FlowError(
                    403, "the form does not belong to this session", "reload the page and bind"
                )
            apis = list(dict.fromkeys(api or []))
            if not apis:
                raise FlowError(400, "no API chosen", "go back and tick at least one API")
            response = _bind(config, admin, ledger, claims, apis)
        except FlowError as error:
            return failed(request, error, "bind")
        except KlutchError as error:
            status = error.status if isinstance(error, Refused) else 400
            return failed(request, FlowError(status, error.message, error.fix), "bind")
        redirect = RedirectResponse(response_url(claims["redirect"], response), status_code=303)
        redirect.delete_cookie(SESSION_COOKIE)  # one binding per login: a replay finds nothing
        requests.labels("bind", "ok").inc()
        return redirect

    return router


def _complete_login(login: BrowserLogin, request: Request) -> dict[str, Any]:
    """The callback's checks, in order, and the session claims of the verified person."""
    params = request.query_params
    try:
        state = login.codec.verify("state", params.get("state"))
        cookie = login.codec.open("login", request.cookies.get(LOGIN_COOKIE))
    except SessionError as error:
        raise FlowError(
            400,
            f"this callback does not belong to a login started in this browser: {error}",
            "start again from the CLI, in the browser that opens",
        ) from None
    if not same(state.get("login", ""), fingerprint(cookie["sid"])):
        raise FlowError(
            400,
            "the state of this callback belongs to another login",
            "start again from the CLI, in the browser that opens",
        )
    if params.get("error"):
        raise FlowError(
            400,
            f"the issuer refused the login: {params.get('error_description') or params['error']}",
            "start again from the CLI",
        )
    if not params.get("code"):
        raise FlowError(400, "the callback carries no authorization code", "start again")
    id_token = _exchange(login, params["code"], cookie["verifier"])
    try:
        principal = login.verifier.verify(id_token)
    except IssuerUnavailable as error:
        raise FlowError(503, error.message, "try again when the issuer is reachable") from None
    except TokenError as error:
        raise FlowError(401, f"the issuer's ID token is not valid: {error.message}", "") from None
    if not same(str(principal.claims.get("nonce", "")), cookie["nonce"]):
        raise FlowError(401, "the ID token's nonce is not this login's", "start again")
    return {
        "sub": principal.subject,
        "iss": login.issuer,
        "email": principal.email,
        "groups": list(principal.groups),
        "redirect": cookie["redirect"],
        "session_id": cookie["session_id"],
        "cluster_id": cookie["cluster_id"],
        "csrf": secrets.token_urlsafe(24),
        "jti": secrets.token_urlsafe(24),  # the session's ID in the ledger
    }


def _exchange(login: BrowserLogin, code: str, verifier: str) -> str:
    """The ID token for the code (client secret and PKCE verifier); never logs the tokens."""
    try:
        provider = login.provider()
        response = login.http.post(
            provider.token_endpoint,
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": login.redirect_uri,
                "code_verifier": verifier,
            },
            auth=(login.flow.client_id, login.client_secret),
        )
    except KlutchError as error:
        raise FlowError(503, error.message, error.fix) from None
    except httpx.TransportError as error:
        raise FlowError(503, f"cannot reach the issuer: {error}", "try again later") from None
    try:
        body = response.json()
    except ValueError:
        body = None
    if not isinstance(body, dict):
        body = {}
    if response.status_code != 200 or not isinstance(body.get("id_token"), str):
        detail = body.get("error_description") or body.get("error") or response.status_code
        raise FlowError(
            400, f"the issuer did not exchange the code: {detail}", "start again from the CLI"
        )
    return body["id_token"]


def _bind(
    config: BindApiConfig,
    admin: Any,
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
