"""The JSON routes for the CLI (``klutch-bind``) and automation, behind OIDC bearer tokens.

Every binding is authorised per API by the caller's groups (403 with the reason), and a caller
only ever sees and deletes their own bindings: a consumer namespace belongs to the OIDC subject
recorded in its identity annotation.
"""

import logging
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, HTTPException

from bind_api import unbinding
from bind_api.bindings import BindingRequest, Repository, bind, find_templates
from bind_api.dependencies import Admin, Caller, Config, Requests
from bind_api.models import BindingIn, RepositoryIn
from bind_api.oidc import Principal
from bind_api.ownership import Refused, owned_by
from klutch_gitops.apis import IDENTITY_ANNOTATION, REPOSITORY_BINDINGS
from klutch_gitops.authz import may_bind
from klutch_gitops.consumer import owner_of
from klutch_gitops.exports import list_templates, offered
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import NAMESPACES

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api/v1")


@router.get("/exports")
def exports(caller: Caller, config: Config, admin: Admin, requests: Requests) -> dict[str, Any]:
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


@router.post("/bindings", status_code=201)
def create_binding(
    body: BindingIn, caller: Caller, config: Config, admin: Admin, requests: Requests
) -> dict[str, Any]:
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


@router.get("/bindings")
def list_bindings(caller: Caller, admin: Admin) -> dict[str, Any]:
    return {"bindings": [_binding_view(admin, ns) for ns in _owned(admin, caller)]}


@router.get("/bindings/{consumer}")
def binding_plan(consumer: str, caller: Caller, admin: Admin) -> dict[str, Any]:
    """What unbinding ``consumer`` deletes: namespaces and claims, databases and protected ones;
    authorized as the DELETE is. 404 once the binding is gone (an unbind has finished)."""
    current = unbinding.plan(admin, _own_consumer(admin, caller, consumer))
    if current is None:
        raise HTTPException(404, f"no binding {consumer} of yours")
    return current.view()


@router.delete("/bindings/{consumer}", status_code=202)
def delete_binding(
    consumer: str, caller: Caller, admin: Admin, requests: Requests, force: bool = False
) -> dict[str, Any]:
    """Start deleting the binding and answer what is being deleted; the caller polls the GET
    until it is 404. 409 while a claim is deletion-protected, unless ``force=true``."""
    try:
        started = unbinding.start(admin, _own_consumer(admin, caller, consumer), force=force)
    except Refused:
        requests.labels("unbind", "refused").inc()
        raise
    requests.labels("unbind", "ok").inc()
    log.info("unbound", extra={"subject": caller.subject, "consumer": consumer, "force": force})
    return started.view() if started else {"consumerNamespace": consumer, "namespaces": []}


def _own_consumer(admin: Kube, caller: Principal, consumer: str) -> str:
    """``consumer`` when it is one of the caller's consumer namespaces, else 404."""
    if consumer not in {ns["metadata"]["name"] for ns in _owned(admin, caller)}:
        raise HTTPException(404, f"no binding {consumer} of yours")
    return consumer


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
                "object": _repository_object(r),
            }
            for r in repositories
        ],
    }


def _repository_object(binding: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's own RepositoryBinding as ``klutch-gitops get`` shows it: spec and status,
    without server bookkeeping (managedFields, uid)."""
    meta = binding["metadata"]
    kept = ("name", "namespace", "creationTimestamp", "generation", "annotations")
    return {k: binding[k] for k in ("apiVersion", "kind", "spec", "status") if k in binding} | {
        "metadata": {k: meta[k] for k in kept if k in meta}
    }
