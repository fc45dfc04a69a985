"""The bind API's HTTP client, and the App Cluster objects that complete a binding.

The client speaks the JSON routes of ``bind_api.routers.api`` with a bearer ID token and turns every
failure into a KlutchError carrying the server's own explanation and a fix. The builders are
pure: the ``klutch-bind`` Namespace, the consumer's kubeconfig Secret and one APIServiceBinding
per bound export, with the export's permission claims answered ``Accepted``.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Iterable, Mapping
from typing import Any

import httpx

from klutch_gitops.apis import API_SERVICE_BINDINGS, CONSUMER_LABEL
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Resource
from klutch_gitops.kube.resources import NAMESPACES, SECRETS
from klutch_gitops.oidc_client import tls_context

BIND_NAMESPACE = "klutch-bind"
FIELD_MANAGER = "klutch-bind"
CLAIM_FIELDS = ("group", "resource", "version", "selector", "required")
LOGIN_FIX = (
    "run 'klutch-bind login URL --issuer ISSUER --client-id CLIENT' again, or give a fresh token "
    "with --token-file or $KLUTCH_BIND_TOKEN"
)


class BindClient:
    """Calls of one caller (one bearer ID token) against one bind API."""

    def __init__(
        self,
        base_url: str,
        token: str,
        ca: str | None = None,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 180.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        verify: ssl.SSLContext | bool = tls_context(ca) if ca else True
        self.http = httpx.Client(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {token}"},
            verify=verify,
            timeout=timeout,
            transport=transport,
        )

    def __enter__(self) -> BindClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.http.close()

    def exports(self) -> list[dict[str, Any]]:
        """Every API offered, with ``allowed``, ``reason`` and ``permissionClaims``."""
        return self._request("GET", "/api/v1/exports").get("exports") or []

    def bind(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create (or confirm) a binding; the answer holds the consumer kubeconfig."""
        return self._request("POST", "/api/v1/bindings", json=dict(body))

    def bindings(self) -> list[dict[str, Any]]:
        return self._request("GET", "/api/v1/bindings").get("bindings") or []

    def unbind_plan(self, consumer: str) -> dict[str, Any] | None:
        """What unbinding ``consumer`` deletes now (namespaces, claims); None once it is gone."""
        response = self._send("GET", f"/api/v1/bindings/{consumer}")
        return None if response.status_code == 404 else self._body(response)

    def unbind(self, consumer: str, force: bool = False) -> dict[str, Any]:
        """Start deleting the binding; the answer is what is being deleted. The bind API refuses
        (409) while a claim is deletion-protected, unless ``force``."""
        params = {"force": "true"} if force else {}
        return self._request("DELETE", f"/api/v1/bindings/{consumer}", params=params)

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        return self._body(self._send(method, path, **kwargs))

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self.http.request(method, path, **kwargs)
        except httpx.HTTPError as error:
            raise transport_error(self.base_url, error) from None

    @staticmethod
    def _body(response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 400:
            raise api_error(response)
        if not response.content:
            return {}
        try:
            body = response.json()
        except ValueError:
            raise KlutchError(
                f"{response.request.url} answered HTTP {response.status_code} without JSON",
                "check that the URL is the bind API's base URL",
            ) from None
        return body if isinstance(body, dict) else {}


def transport_error(base_url: str, error: httpx.HTTPError) -> KlutchError:
    """Why no answer came: an untrusted certificate, plain http to a TLS port, or the network."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, ssl.SSLCertVerificationError):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, ssl.SSLCertVerificationError):
        reason = cause.verify_message or str(cause)
        fix = (
            "use a URL whose host name the certificate names"
            if "mismatch" in reason.lower()
            else "pass --ca FILE: the PEM bundle of the CA that signed the bind API's certificate"
        )
        return KlutchError(
            f"the bind API's TLS certificate at {base_url} is not trusted: {reason}", fix
        )
    fix = "check the URL, the network and, for a private CA, --ca"
    if base_url.startswith("http://") and isinstance(
        error, (httpx.RemoteProtocolError, httpx.ReadError)
    ):
        fix = "if the bind API serves TLS, use an https:// URL (with --ca for a private CA)"
    return KlutchError(f"cannot reach the bind API at {base_url}: {error}", fix)


def api_error(response: httpx.Response) -> KlutchError:
    """A KlutchError from an error answer: the server's ``detail`` or ``error``, and a fix."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    body = body if isinstance(body, dict) else {}
    detail = _detail(body.get("detail")) or body.get("error") or f"HTTP {response.status_code}"
    status = response.status_code
    fixes = {
        401: LOGIN_FIX,
        403: "ask the platform team for membership in a group allowed to bind this API",
        404: "run 'klutch-bind status <url>' to list your bindings, and check the URL",
        422: "check the request's options (see --help)",
        503: "the bind API cannot reach its OIDC issuer; try again later",
    }
    fix = body.get("fix") or fixes.get(status, "check the bind API's logs")
    prefix = "not authenticated: " if status == 401 else ""
    return KlutchError(f"{prefix}{detail}", fix)


def _detail(detail: Any) -> str:
    """FastAPI's ``detail``: a string, or a list of validation errors."""
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', []))}: {item.get('msg', '')}"
            if isinstance(item, dict)
            else str(item)
            for item in detail
        )
    return str(detail) if detail else ""


# -- pure builders ----------------------------------------------------------------------------


def secret_name(consumer: str) -> str:
    return f"{consumer}-kubeconfig"


def namespace_object() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": BIND_NAMESPACE}}


def kubeconfig_secret(consumer: str, kubeconfig: str) -> dict[str, Any]:
    """The Secret holding the consumer's Control Plane kubeconfig under key ``kubeconfig``."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_name(consumer),
            "namespace": BIND_NAMESPACE,
            "labels": {CONSUMER_LABEL: consumer},
        },
        "type": "Opaque",
        "data": {"kubeconfig": base64.b64encode(kubeconfig.encode()).decode()},
    }


def accepted_claims(claims: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The export's permission claims, each answered ``Accepted``."""
    return [
        {**{k: claim[k] for k in CLAIM_FIELDS if k in claim}, "state": "Accepted"}
        for claim in claims
    ]


def service_binding(api: str, consumer: str, claims: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The cluster-scoped APIServiceBinding named after the export ``<plural>.<group>``; its
    Secret lives in ``klutch-bind``, as kubectl bind writes it (servicebindings.go)."""
    return {
        "apiVersion": API_SERVICE_BINDINGS.api_version,
        "kind": API_SERVICE_BINDINGS.kind,
        "metadata": {"name": api, "labels": {CONSUMER_LABEL: consumer}},
        "spec": {
            "kubeconfigSecretRef": {
                "namespace": BIND_NAMESPACE,
                "name": secret_name(consumer),
                "key": "kubeconfig",
            },
            "permissionClaims": accepted_claims(claims),
        },
    }


def app_objects(
    consumer: str, kubeconfig: str, claims_by_api: Mapping[str, list[dict[str, Any]]]
) -> list[tuple[Resource, dict[str, Any]]]:
    """Everything the App Cluster needs, in apply order: Namespace, Secret, bindings."""
    return [
        (NAMESPACES, namespace_object()),
        (SECRETS, kubeconfig_secret(consumer, kubeconfig)),
        *(
            (API_SERVICE_BINDINGS, service_binding(api, consumer, claims))
            for api, claims in sorted(claims_by_api.items())
        ),
    ]


def bindings_of(consumer: str, items: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the APIServiceBindings whose kubeconfigSecretRef names the consumer's Secret."""
    return sorted(
        item["metadata"]["name"]
        for item in items
        if ((item.get("spec") or {}).get("kubeconfigSecretRef") or {}).get("name")
        == secret_name(consumer)
    )


def describe_claim(claim: Mapping[str, Any]) -> str:
    """One line for a person: what the claim lets the provider see or write in the App Cluster."""
    resource = f"{claim.get('resource', '?')}" + (
        f".{claim['group']}" if claim.get("group") else ""
    )
    selector = claim.get("selector") or {}
    names = ", ".join(selector.get("names") or ["*"])
    where = ", ".join(selector.get("namespaces") or []) or "all namespaces"
    owner = selector.get("owner") or "Consumer"
    required = " (required)" if claim.get("required") else ""
    return f"{resource} names [{names}] in {where}, owned by {owner}{required}"


GITOPS_README = """# klutch-bind: App Cluster objects of {consumer}

Apply these files to the App Cluster (for example through your GitOps tool).

The APIServiceBindings read the Control Plane credentials from the Secret
`{namespace}/{secret}` (key `kubeconfig`). That Secret is deliberately NOT in this
directory: secrets never belong in Git. Create it out of band, directly in the App Cluster:
run the same `klutch-bind bind ... --gitops-out` command with `--kubeconfig <App kubeconfig>`
(binding again is idempotent; only the Namespace and the Secret are applied to the cluster),
or provide it through your secret manager (sealed or external secrets).
"""


def gitops_files(
    consumer: str, claims_by_api: Mapping[str, list[dict[str, Any]]]
) -> dict[str, dict[str, Any] | str]:
    """File name → object (or README text) for Git: every App object except the Secret."""
    files: dict[str, dict[str, Any] | str] = {"namespace-klutch-bind.yaml": namespace_object()}
    for api, claims in sorted(claims_by_api.items()):
        files[f"apiservicebinding-{api}.yaml"] = service_binding(api, consumer, claims)
    files["README.md"] = GITOPS_README.format(
        consumer=consumer, namespace=BIND_NAMESPACE, secret=secret_name(consumer)
    )
    return files
