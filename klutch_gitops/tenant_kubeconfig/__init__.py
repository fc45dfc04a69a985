"""Kubeconfigs that tenants give us, parsed by our own strict code into an API client.

The kubernetes client's kubeconfig loader does whatever a kubeconfig says: an ``exec`` or
``auth-provider`` user runs a command, ``tokenFile`` and every file-path field read files of the
process, ``proxy-url`` sends every request through a host of the author's choosing. A kubeconfig
from a bind request or a Secret is hostile input (DESIGN.md, principle 7), so it never reaches that
loader: it is read here, bounded, and only this shape is accepted —

- exactly one cluster, one user and one context, and ``current-context`` naming that context;
- ``server``: an ``https://`` URL with no credentials, query or fragment;
- ``certificate-authority-data``: required, PEM certificates (the only roots the client trusts);
- the user: a bearer ``token``, or ``client-certificate-data`` + ``client-key-data``, or both.

Everything else that client-go knows is refused with the field's path and the fix (the fields are
those of k8s.io/client-go/tools/clientcmd/api/v1/types.go). ``tls-server-name`` is accepted: the
tenant already chooses the server and the CA, and it only names which name of the server's
certificate is verified, so it reaches nothing more. ``disable-compression`` and ``preferences``
change nothing here and are accepted so that ``kubectl config view --minify --flatten`` output
is. Kubeconfig files that the platform team names in its own config are not tenant input and keep
the library's loader (``klutch_gitops.kube.client.api_client`` with a Path).

Errors name fields, never values: a token or key never reaches a message, a log or a status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from klutch_gitops.tenant_kubeconfig.client import api_client
from klutch_gitops.tenant_kubeconfig.document import TenantKubeconfig, check_document
from klutch_gitops.tenant_kubeconfig.problems import (
    ONE_OF_EACH,
    KubeconfigRefused,
    Problem,
    refused,
)
from klutch_gitops.yamlsafe import YamlError, load_documents

MAX_BYTES = 128 * 1024  # a CA bundle, a client certificate chain and a 4096-bit key fit easily


@dataclass(frozen=True)
class _Limits:
    max_documents: int = 1
    max_nodes: int = 500
    max_depth: int = 12


def load(text: str) -> Any:
    """The YAML document of ``text``, bounded in size, nodes and depth (for editing it)."""
    size = len(text.encode(errors="replace"))
    if size > MAX_BYTES:
        raise refused(
            "kubeconfig",
            f"is {size} bytes, more than the {MAX_BYTES} a kubeconfig of one context needs",
            ONE_OF_EACH,
        )
    try:
        documents = load_documents(text, _Limits())
    except YamlError as error:
        raise refused("kubeconfig", f"is not YAML we accept: {error.message}", error.fix) from None
    if not documents:
        raise refused("kubeconfig", "is empty", ONE_OF_EACH)
    return documents[0].value


def parse(text: str | bytes) -> TenantKubeconfig:
    """Check a tenant's kubeconfig text; raises KubeconfigRefused naming every refused field."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise refused("kubeconfig", "is not UTF-8 text", ONE_OF_EACH) from None
    return check(load(text))


def check(document: Any) -> TenantKubeconfig:
    """Check a parsed kubeconfig; raises KubeconfigRefused naming every refused field."""
    problems: list[Problem] = []
    result = check_document(document, problems)
    if problems or result is None:
        raise KubeconfigRefused(problems)
    return result


def load_client(text: str | bytes | Mapping[str, Any]) -> client.ApiClient:
    """An ApiClient for a tenant's kubeconfig (text or parsed), after the checks above."""
    return api_client(check(dict(text)) if isinstance(text, Mapping) else parse(text))
