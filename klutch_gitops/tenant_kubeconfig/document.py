"""The structure of a tenant kubeconfig, checked field by field (pure): one cluster, one user and
one context, the fields client-go knows that a tenant may not use refused with why and what to do
instead, and what is accepted taken into a TenantKubeconfig."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from cryptography.hazmat.primitives import serialization

from klutch_gitops.tenant_kubeconfig.problems import (
    FLATTEN,
    INLINE_CREDENTIALS,
    ONE_OF_EACH,
    Problem,
)
from klutch_gitops.tenant_kubeconfig.values import (
    dns_name,
    pem_certificates,
    pem_private_key,
    server,
)

MAX_TOKEN_CHARS = 16 * 1024

# Fields client-go knows that a tenant may not use, with why and what to do instead.
_REFUSED_CLUSTER = {
    "certificate-authority": (
        "names a file on the reconciler's host",
        "use certificate-authority-data: " + FLATTEN,
    ),
    "proxy-url": (
        "would send the reconciler's requests through a proxy of the kubeconfig's choosing",
        "remove proxy-url: the reconciler reaches the server itself",
    ),
    "extensions": ("extensions are not read from a tenant kubeconfig", "remove extensions"),
}
_REFUSED_USER = {
    "exec": ("an exec plugin would run a command inside the reconciler", INLINE_CREDENTIALS),
    "auth-provider": (
        "an auth-provider plugin would run inside the reconciler",
        INLINE_CREDENTIALS,
    ),
    "tokenFile": (
        "names a file on the reconciler's host",
        "put the token itself in `token`",
    ),
    "client-certificate": (
        "names a file on the reconciler's host",
        "use client-certificate-data: " + FLATTEN,
    ),
    "client-key": (
        "names a file on the reconciler's host",
        "use client-key-data: " + FLATTEN,
    ),
    "username": ("basic authentication is not supported", INLINE_CREDENTIALS),
    "password": ("basic authentication is not supported", INLINE_CREDENTIALS),
    "extensions": ("extensions are not read from a tenant kubeconfig", "remove extensions"),
}
_IMPERSONATION = ("as", "as-uid", "as-groups", "as-user-extra")
for _name in _IMPERSONATION:
    _REFUSED_USER[_name] = (
        "impersonation is not allowed",
        "remove it and give the credentials of the identity the reconciler should act as",
    )
_REFUSED_CONTEXT = {
    "extensions": ("extensions are not read from a tenant kubeconfig", "remove extensions"),
}

_TOKEN = re.compile(r"[\x21-\x7e]+")  # visible ASCII: nothing that could split a header


@dataclass(frozen=True)
class TenantKubeconfig:
    """What we take from an accepted kubeconfig; certificates and keys re-encoded as PEM."""

    server: str
    ca_pem: bytes
    tls_server_name: str | None = None
    token: str | None = field(default=None, repr=False)
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = field(default=None, repr=False)


def check_document(doc: Any, problems: list[Problem]) -> TenantKubeconfig | None:
    if not isinstance(doc, dict):
        problems.append(Problem("kubeconfig", "is not a mapping", ONE_OF_EACH))
        return None
    for key, value in doc.items():
        if key == "apiVersion" and value != "v1":
            problems.append(Problem("apiVersion", "must be v1", "set apiVersion: v1"))
        elif key == "kind" and value != "Config":
            problems.append(Problem("kind", "must be Config", "set kind: Config"))
        elif key == "preferences":
            _check_preferences(value, problems)
        elif key == "extensions":
            problems.append(Problem(key, *_REFUSED_CONTEXT["extensions"]))
        elif key not in ("apiVersion", "kind", "clusters", "users", "contexts", "current-context"):
            problems.append(_unknown(str(key)))
    cluster = _only_entry(doc, "clusters", "cluster", problems)
    user = _only_entry(doc, "users", "user", problems)
    context = _only_entry(doc, "contexts", "context", problems)
    if context is not None:
        _check_context(doc, context, cluster, user, problems)
    checked_cluster = _check_cluster(cluster[1], problems) if cluster else None
    checked_user = _check_user(user[1], problems) if user else None
    if problems or checked_cluster is None or checked_user is None:
        return None
    server, ca_pem, tls_server_name = checked_cluster
    token, cert_pem, key_pem = checked_user
    return TenantKubeconfig(server, ca_pem, tls_server_name, token, cert_pem, key_pem)


def _unknown(path: str) -> Problem:
    return Problem(path, "is not a field the reconciler reads", "remove it")


def _check_preferences(value: Any, problems: list[Problem]) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        problems.append(Problem("preferences", "must be a mapping", "remove preferences"))
        return
    for key in value:
        if key == "extensions":
            problems.append(Problem("preferences.extensions", *_REFUSED_CONTEXT["extensions"]))
        elif key != "colors":
            problems.append(_unknown(f"preferences.{key}"))


def _only_entry(
    doc: dict[str, Any], plural: str, kind: str, problems: list[Problem]
) -> tuple[str, dict[str, Any]] | None:
    """The name and body of the one entry of ``plural``, or None after recording why not."""
    entries = doc.get(plural)
    if not isinstance(entries, list) or len(entries) != 1:
        if isinstance(entries, list):
            found = f"has {len(entries)} entries"
        else:
            found = "is missing" if entries is None else "is not a list"
        problems.append(Problem(plural, f"{found}; exactly one {kind} is needed", ONE_OF_EACH))
        return None
    entry, path = entries[0], f"{plural}[0]"
    if not isinstance(entry, dict):
        problems.append(Problem(path, f"must be a mapping with name and {kind}", ONE_OF_EACH))
        return None
    for key in entry:
        if key not in ("name", kind):
            problems.append(_unknown(f"{path}.{key}"))
    name, body = entry.get("name"), entry.get(kind)
    if not isinstance(name, str) or not name:
        problems.append(Problem(f"{path}.name", "must be a non-empty string", f"name the {kind}"))
    if not isinstance(body, dict):
        problems.append(Problem(f"{path}.{kind}", "must be a mapping", ONE_OF_EACH))
        return None
    return (name if isinstance(name, str) else ""), body


def _check_context(
    doc: dict[str, Any],
    context: tuple[str, dict[str, Any]],
    cluster: tuple[str, dict[str, Any]] | None,
    user: tuple[str, dict[str, Any]] | None,
    problems: list[Problem],
) -> None:
    name, body = context
    path = "contexts[0].context"
    if doc.get("current-context") != name:
        problems.append(
            Problem(
                "current-context",
                "must name the kubeconfig's one context",
                f"set current-context: {name}" if name else ONE_OF_EACH,
            )
        )
    for key, value in body.items():
        if key in _REFUSED_CONTEXT:
            problems.append(Problem(f"{path}.{key}", *_REFUSED_CONTEXT[key]))
        elif key == "namespace":
            if not isinstance(value, str):
                problems.append(Problem(f"{path}.namespace", "must be a string", "fix or remove"))
        elif key not in ("cluster", "user"):
            problems.append(_unknown(f"{path}.{key}"))
    for kind, entry in (("cluster", cluster), ("user", user)):
        if entry is not None and body.get(kind) != entry[0]:
            problems.append(
                Problem(
                    f"{path}.{kind}",
                    f"must name the kubeconfig's one {kind}",
                    f"set it to {entry[0]}" if entry[0] else ONE_OF_EACH,
                )
            )


def _check_cluster(
    body: dict[str, Any], problems: list[Problem]
) -> tuple[str, bytes, str | None] | None:
    path = "clusters[0].cluster"
    before = len(problems)
    for key, value in body.items():
        where = f"{path}.{key}"
        if key in _REFUSED_CLUSTER:
            problems.append(Problem(where, *_REFUSED_CLUSTER[key]))
        elif key == "insecure-skip-tls-verify":
            if value is not False:
                problems.append(
                    Problem(
                        where,
                        "would accept any server certificate",
                        "remove it and put the server's CA in certificate-authority-data",
                    )
                )
        elif key == "disable-compression":
            if not isinstance(value, bool):
                problems.append(Problem(where, "must be true or false", "fix or remove it"))
        elif key not in ("server", "certificate-authority-data", "tls-server-name"):
            problems.append(_unknown(where))
    url = server(body.get("server"), f"{path}.server", problems)
    ca = pem_certificates(
        body.get("certificate-authority-data"),
        f"{path}.certificate-authority-data",
        "add the App Cluster's CA certificate (base64 of its PEM): the reconciler trusts no "
        "other root for it",
        problems,
    )
    name = body.get("tls-server-name")
    if name is not None and not dns_name(name):
        problems.append(
            Problem(
                f"{path}.tls-server-name",
                "must be a DNS name",
                "set the DNS name of the server's certificate, or remove it",
            )
        )
    if len(problems) > before or url is None or ca is None:
        return None
    return url, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in ca), name


def _check_user(
    body: dict[str, Any], problems: list[Problem]
) -> tuple[str | None, bytes | None, bytes | None] | None:
    path = "users[0].user"
    before = len(problems)
    for key in body:
        if key in _REFUSED_USER:
            problems.append(Problem(f"{path}.{key}", *_REFUSED_USER[key]))
        elif key not in ("token", "client-certificate-data", "client-key-data"):
            problems.append(_unknown(f"{path}.{key}"))
    token = body.get("token")
    if token is not None and (
        not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS or not _TOKEN.fullmatch(token)
    ):
        problems.append(
            Problem(
                f"{path}.token",
                f"must be one word of visible ASCII, at most {MAX_TOKEN_CHARS} characters",
                "put the bearer token itself there, without spaces or line breaks",
            )
        )
        token = None
    has_cert, has_key = "client-certificate-data" in body, "client-key-data" in body
    cert_pem = key_pem = None
    if has_cert or has_key:
        cert_pem, key_pem = _client_pair(body, path, problems)
    elif token is None and len(problems) == before:
        problems.append(Problem(path, "has no credentials", INLINE_CREDENTIALS))
    if len(problems) > before:
        return None
    return token, cert_pem, key_pem


def _client_pair(
    body: dict[str, Any], path: str, problems: list[Problem]
) -> tuple[bytes | None, bytes | None]:
    """The client certificate chain and its key, checked to belong together."""
    if "client-certificate-data" not in body or "client-key-data" not in body:
        missing = (
            "client-key-data" if "client-certificate-data" in body else "client-certificate-data"
        )
        problems.append(
            Problem(f"{path}.{missing}", "is missing", "give both the certificate and its key")
        )
        return None, None
    chain = pem_certificates(
        body["client-certificate-data"],
        f"{path}.client-certificate-data",
        "put the base64 of the client certificate's PEM there",
        problems,
    )
    key = pem_private_key(body["client-key-data"], f"{path}.client-key-data", problems)
    if chain is None or key is None:
        return None, None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if chain[0].public_key().public_bytes(*spki) != key.public_key().public_bytes(*spki):
        problems.append(
            Problem(
                f"{path}.client-key-data",
                "is not the key of client-certificate-data",
                "put the private key that belongs to the certificate there",
            )
        )
        return None, None
    return (
        b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )
