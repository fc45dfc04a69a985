"""The bind API's JSON interface for the CLI and automation, behind OIDC bearer tokens.

Every request is authenticated by ``OIDCVerifier`` (401 for any bad token; 503 with Retry-After
when the issuer is unreachable, before anything is changed), every binding is authorised per API
by the caller's groups (403 with the reason), and a caller only ever sees and deletes their own
bindings: a consumer namespace belongs to the OIDC subject recorded in its identity annotation.
"""

import logging
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, HTTPException, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, generate_latest
from pydantic import BaseModel, Field, field_validator

from bind_api import inputs
from bind_api.bindings import (
    BindingRequest,
    Refused,
    Repository,
    bind,
    find_templates,
    owned_by,
    unbind,
)
from bind_api.config import BindApiConfig
from bind_api.oidc import (
    REFETCH_INTERVAL,
    IssuerUnavailable,
    OIDCVerifier,
    Principal,
    TokenError,
)
from bind_api.web import BrowserLogin, browser_router
from klutch_gitops import tenant_kubeconfig
from klutch_gitops.apis import IDENTITY_ANNOTATION, REPOSITORY_BINDINGS
from klutch_gitops.authz import may_bind
from klutch_gitops.consumer import owner_of
from klutch_gitops.errors import KlutchError
from klutch_gitops.exports import list_templates, offered
from klutch_gitops.kube.client import NAMESPACES, Kube
from klutch_gitops.urls import (
    TENANT_TRANSPORTS,
    check_branch,
    check_repo_path,
    normalize_repo_url,
    redact,
    url_transport,
)

log = logging.getLogger(__name__)

ISSUER_RETRY_AFTER = int(REFETCH_INTERVAL)  # seconds: how often the issuer's keys are retried


class RepositoryIn(BaseModel):
    url: str
    branch: str = "main"
    path: str = "."
    app_namespaces: list[str] = Field(
        alias="appNamespaces", min_length=1, max_length=inputs.MAX_APP_NAMESPACES
    )
    username: str | None = None
    password: str | None = Field(default=None, repr=False)
    ssh_private_key: str | None = Field(default=None, alias="sshPrivateKey", repr=False)
    known_hosts: str | None = Field(default=None, alias="knownHosts")

    @field_validator("url")
    @classmethod
    def _names_a_repository(cls, url: str) -> str:
        """Refused before anything is bound; credentials belong in their own fields."""
        if redact(url) != url:  # linear in the URL's length, whatever its length
            raise ValueError(
                "the repository URL carries credentials: send them as username/password or "
                "sshPrivateKey, which go to a Secret"
            )
        try:
            url_transport(url, TENANT_TRANSPORTS)  # no file://, ext::, -options (urls.py)
            normalize_repo_url(url)
        except KlutchError as error:
            raise ValueError(f"{error.message} ({error.fix})") from None
        return url

    @field_validator("branch")
    @classmethod
    def _a_branch(cls, branch: str) -> str:
        """A name git check-ref-format accepts; it reaches git's argv in the reconciler."""
        if problem := check_branch(branch):
            raise ValueError(
                f"the branch {problem}; name a branch git accepts, e.g. main or release/1.2"
            )
        return branch

    @field_validator("path")
    @classmethod
    def _a_folder(cls, path: str) -> str:
        """A folder inside the repository: the reconciler reads claims below it."""
        if problem := check_repo_path(path):
            raise ValueError(
                f"the path {problem}; name a folder inside the repository, e.g. claims"
            )
        return path

    @field_validator("app_namespaces")
    @classmethod
    def _namespace_names(cls, names: list[str]) -> list[str]:
        """DNS-1123 labels, each once: checked before anything is bound (no orphan Secret)."""
        return inputs.app_namespaces(names)


class BindingIn(BaseModel):
    cluster_id: str = Field(alias="clusterId", min_length=1, max_length=253)
    apis: list[str] = Field(min_length=1, max_length=64)
    repository: RepositoryIn | None = None
    app_kubeconfig: str | None = Field(default=None, alias="appKubeconfig", repr=False)

    @field_validator("cluster_id")
    @classmethod
    def _cluster_id(cls, value: str) -> str:
        """Half of the identity annotation: never a '#', never a control character."""
        return inputs.cluster_id(value)

    @field_validator("app_kubeconfig")
    @classmethod
    def _tenant_kubeconfig(cls, text: str | None) -> str | None:
        """Checked before anything is bound, as the reconciler checks it again before use: a
        kubeconfig that could run a command, read a file or reach a proxy is a 422 naming the
        field (``users[0].user.exec``) and the fix, never a stored Secret."""
        if text is not None:
            try:
                tenant_kubeconfig.parse(text)
            except KlutchError as error:
                raise ValueError(f"{error.message} (fix: {error.fix})") from None
        return text


def create_app(
    config: BindApiConfig,
    admin: Kube,
    verifier: OIDCVerifier,
    browser: BrowserLogin | None = None,
) -> FastAPI:
    """The JSON API, and Klutch's browser flow when ``browser`` is given."""
    app = FastAPI(title="klutch-gitops bind API", docs_url=None, redoc_url=None)
    registry = CollectorRegistry()
    requests = Counter(
        "klutch_bind_requests_total",
        "Bind API requests by outcome",
        ["operation", "outcome"],
        registry=registry,
    )

    def principal(authorization: Annotated[str | None, Header()] = None) -> Principal:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise HTTPException(
                401,
                "missing bearer token: send Authorization: Bearer <ID token>",
                headers={"WWW-Authenticate": "Bearer"},
            )
        try:
            return verifier.verify(token.strip())
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

    Caller = Annotated[Principal, Depends(principal)]

    @app.exception_handler(RequestValidationError)
    def invalid_request(_request: Any, error: RequestValidationError) -> JSONResponse:
        """FastAPI's 422 without the ``input`` it echoes: that may be a whole kubeconfig, or a
        password, which must not travel back into a proxy's or CLI's logs."""
        detail = [{k: e[k] for k in ("type", "loc", "msg") if k in e} for e in error.errors()]
        return JSONResponse({"detail": detail}, status_code=422)

    @app.exception_handler(KlutchError)
    def klutch_error(_request: Any, error: KlutchError) -> JSONResponse:
        status = error.status if isinstance(error, Refused) else 400
        return JSONResponse({"error": error.message, "fix": error.fix}, status_code=status)

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/exports")
    def exports(caller: Caller) -> dict[str, Any]:
        """Every API offered, and whether the caller may bind it (and why not)."""
        items = []
        for api, template in sorted(offered(list_templates(admin)).items()):
            decision = may_bind(template, api, caller.groups, config.default_allowed_groups)
            items.append(
                {
                    "api": api,
                    "template": template["metadata"]["name"],
                    "permissionClaims": template["spec"].get("permissionClaims") or [],
                    "allowed": decision.allowed,
                    "reason": decision.reason,
                }
            )
        requests.labels("exports", "ok").inc()
        return {"exports": items}

    @app.post("/api/v1/bindings", status_code=201)
    def create_binding(body: BindingIn, caller: Caller) -> dict[str, Any]:
        templates = find_templates(admin, body.apis)
        refused = [
            d.reason
            for api in body.apis
            if not (
                d := may_bind(templates[api], api, caller.groups, config.default_allowed_groups)
            ).allowed
        ]
        if refused:
            requests.labels("bind", "forbidden").inc()
            raise HTTPException(403, "; ".join(refused))
        result = bind(
            admin,
            BindingRequest(
                identity=caller.subject,
                cluster_id=body.cluster_id,
                apis=tuple(body.apis),
                repository=_repository(body.repository),
                app_kubeconfig=body.app_kubeconfig,
                # recorded on the consumer namespace, as the browser flow does, so export
                # requests made later with the binder kubeconfig are authorized alike
                groups=tuple(caller.groups),
                default_allowed_groups=tuple(config.default_allowed_groups),
            ),
            prefix=config.consumer_prefix,
            limit=config.bindings_per_identity,
        )
        requests.labels("bind", "ok").inc()
        log.info(
            "bound",
            extra={
                "subject": caller.subject,
                "consumer": result.consumer_namespace,
                "apis": list(body.apis),
                "repositoryBinding": result.repository_binding,
            },
        )
        return {
            "consumerNamespace": result.consumer_namespace,
            "exports": list(result.exports),
            "phases": result.phases,
            "repositoryBinding": result.repository_binding,
            "kubeconfig": result.kubeconfig,
        }

    @app.get("/api/v1/bindings")
    def list_bindings(caller: Caller) -> dict[str, Any]:
        return {"bindings": [_binding_view(admin, ns) for ns in _owned(admin, caller)]}

    @app.delete("/api/v1/bindings/{consumer}", status_code=204)
    def delete_binding(consumer: str, caller: Caller) -> Response:
        if consumer not in {ns["metadata"]["name"] for ns in _owned(admin, caller)}:
            raise HTTPException(404, f"no binding {consumer} of yours")
        unbind(admin, consumer)
        requests.labels("unbind", "ok").inc()
        log.info("unbound", extra={"subject": caller.subject, "consumer": consumer})
        return Response(status_code=204)

    if browser is not None:
        app.include_router(browser_router(config, admin, browser, requests))
    return app


def _repository(body: RepositoryIn | None) -> Repository | None:
    if body is None:
        return None
    return Repository(
        url=body.url,
        branch=body.branch,
        path=body.path,
        app_namespaces=tuple(body.app_namespaces),
        username=body.username,
        password=body.password,
        ssh_private_key=body.ssh_private_key,
        known_hosts=body.known_hosts,
    )


def _owned(admin: Kube, caller: Principal) -> list[Mapping[str, Any]]:
    """Consumer namespaces whose identity annotation names exactly the caller's subject."""
    return owned_by(admin.list(NAMESPACES)[0], caller.subject)


def _binding_view(admin: Kube, namespace: Mapping[str, Any]) -> dict[str, Any]:
    identity = namespace["metadata"]["annotations"][IDENTITY_ANNOTATION]
    repositories, _ = admin.list(REPOSITORY_BINDINGS, namespace["metadata"]["name"])
    return {
        "consumerNamespace": namespace["metadata"]["name"],
        "clusterId": owner_of(identity)[1],
        "created": namespace["metadata"].get("creationTimestamp"),
        "repositories": [
            {
                "name": r["metadata"]["name"],
                "url": r["spec"]["url"],
                "branch": r["spec"].get("branch"),
                "path": r["spec"].get("path"),
            }
            for r in repositories
        ],
    }
