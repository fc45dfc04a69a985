"""Klutch's browser bind flow, its decisions: the wire types kubectl-bind speaks, the CLI's
callback, and the response sent back to it. Pure functions; the routes are
``bind_api.routers.browser``, the login's checks ``bind_api.browser_login``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from bind_api import inputs

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


class FlowError(Exception):
    """Ends a browser step with a page that says what happened and what to do."""

    def __init__(self, status: int, message: str, fix: str) -> None:
        super().__init__(message)
        self.status, self.message, self.fix = status, message, fix


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
