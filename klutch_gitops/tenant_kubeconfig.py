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

import base64
import binascii
import ipaddress
import os
import re
import shutil
import ssl
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import urllib3
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from kubernetes import client

from klutch_gitops.errors import KlutchError
from klutch_gitops.yamlsafe import YamlError, load_documents

MAX_BYTES = 128 * 1024  # a CA bundle, a client certificate chain and a 4096-bit key fit easily
MAX_TOKEN_CHARS = 16 * 1024

INLINE_CREDENTIALS = (
    "put a bearer `token` or `client-certificate-data` + `client-key-data` inline in the user "
    "(a service account token of the App Cluster works)"
)
FLATTEN = "inline the file's content (`kubectl config view --minify --flatten` does this)"
ONE_OF_EACH = (
    "send one cluster, user and context: the output of "
    "`kubectl config view --minify --flatten --context <name>`"
)

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

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_PATH = re.compile(r"(/[A-Za-z0-9._~%!$&'()*+,;=:@-]*)*")
_TOKEN = re.compile(r"[\x21-\x7e]+")  # visible ASCII: nothing that could split a header


@dataclass(frozen=True)
class Problem:
    """One refused field: its path in the kubeconfig, what is wrong, and what to do."""

    field: str
    problem: str
    fix: str


class KubeconfigRefused(KlutchError):
    """A tenant kubeconfig we do not accept; ``problems`` lists every refused field."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__(
            "; ".join(f"{p.field}: {p.problem}" for p in problems),
            "; ".join(dict.fromkeys(p.fix for p in problems)),
        )
        self.problems = tuple(problems)


@dataclass(frozen=True)
class TenantKubeconfig:
    """What we take from an accepted kubeconfig; certificates and keys re-encoded as PEM."""

    server: str
    ca_pem: bytes
    tls_server_name: str | None = None
    token: str | None = field(default=None, repr=False)
    client_cert_pem: bytes | None = None
    client_key_pem: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class _Limits:
    max_documents: int = 1
    max_nodes: int = 500
    max_depth: int = 12


def load(text: str) -> Any:
    """The YAML document of ``text``, bounded in size, nodes and depth (for editing it)."""
    size = len(text.encode(errors="replace"))
    if size > MAX_BYTES:
        raise _refused(
            "kubeconfig",
            f"is {size} bytes, more than the {MAX_BYTES} a kubeconfig of one context needs",
            ONE_OF_EACH,
        )
    try:
        documents = load_documents(text, _Limits())
    except YamlError as error:
        raise _refused("kubeconfig", f"is not YAML we accept: {error.message}", error.fix) from None
    if not documents:
        raise _refused("kubeconfig", "is empty", ONE_OF_EACH)
    return documents[0].value


def parse(text: str | bytes) -> TenantKubeconfig:
    """Check a tenant's kubeconfig text; raises KubeconfigRefused naming every refused field."""
    if isinstance(text, bytes):
        try:
            text = text.decode()
        except UnicodeDecodeError:
            raise _refused("kubeconfig", "is not UTF-8 text", ONE_OF_EACH) from None
    return check(load(text))


def check(document: Any) -> TenantKubeconfig:
    """Check a parsed kubeconfig; raises KubeconfigRefused naming every refused field."""
    problems: list[Problem] = []
    result = _check(document, problems)
    if problems or result is None:
        raise KubeconfigRefused(problems)
    return result


def load_client(text: str | bytes | Mapping[str, Any]) -> client.ApiClient:
    """An ApiClient for a tenant's kubeconfig (text or parsed), after the checks above."""
    return api_client(check(dict(text)) if isinstance(text, Mapping) else parse(text))


# -- the checks (pure) ------------------------------------------------------------------------


def _check(doc: Any, problems: list[Problem]) -> TenantKubeconfig | None:
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
    doc: dict, plural: str, kind: str, problems: list[Problem]
) -> tuple[str, dict] | None:
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
    doc: dict,
    context: tuple[str, dict],
    cluster: tuple[str, dict] | None,
    user: tuple[str, dict] | None,
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


def _check_cluster(body: dict, problems: list[Problem]) -> tuple[str, bytes, str | None] | None:
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
    server = _server(body.get("server"), f"{path}.server", problems)
    ca = _pem_certificates(
        body.get("certificate-authority-data"),
        f"{path}.certificate-authority-data",
        "add the App Cluster's CA certificate (base64 of its PEM): the reconciler trusts no "
        "other root for it",
        problems,
    )
    name = body.get("tls-server-name")
    if name is not None and not _dns_name(name):
        problems.append(
            Problem(
                f"{path}.tls-server-name",
                "must be a DNS name",
                "set the DNS name of the server's certificate, or remove it",
            )
        )
    if len(problems) > before or server is None or ca is None:
        return None
    return server, b"".join(c.public_bytes(serialization.Encoding.PEM) for c in ca), name


def _check_user(
    body: dict, problems: list[Problem]
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
    body: dict, path: str, problems: list[Problem]
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
    chain = _pem_certificates(
        body["client-certificate-data"],
        f"{path}.client-certificate-data",
        "put the base64 of the client certificate's PEM there",
        problems,
    )
    key = _pem_private_key(body["client-key-data"], f"{path}.client-key-data", problems)
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


def _server(value: Any, path: str, problems: list[Problem]) -> str | None:
    """The server URL rebuilt from its checked parts: https, a host, a port, a plain path."""
    fix = "set the App Cluster's API server as https://host[:port][/path]"
    if not isinstance(value, str) or not value:
        problems.append(Problem(path, "is missing", fix))
        return None
    if any(c.isspace() or not c.isprintable() for c in value) or "\\" in value:
        problems.append(Problem(path, "contains spaces, control characters or backslashes", fix))
        return None
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unclosed IPv6 bracket
        problems.append(Problem(path, "is not a valid https://host[:port][/path] URL", fix))
        return None
    if parts.scheme != "https" or not value.startswith("https://"):
        problems.append(Problem(path, "must be an https:// URL", fix))
        return None
    if "@" in parts.netloc:
        problems.append(
            Problem(path, "carries credentials", "remove user:password@; " + INLINE_CREDENTIALS)
        )
        return None
    if parts.query or parts.fragment or "?" in value or "#" in value:
        problems.append(Problem(path, "must not have a query or fragment", fix))
        return None
    try:
        port = parts.port
    except ValueError:
        port = -1
    host = parts.hostname or ""
    if port == -1 or port == 0 or not _host(host) or not _PATH.fullmatch(parts.path):
        problems.append(Problem(path, "is not a valid https://host[:port][/path] URL", fix))
        return None
    if parts.netloc.startswith("[") and ":" not in host:  # ``[v1.x]``: brackets hold IPv6 only
        problems.append(Problem(path, "is not a valid https://host[:port][/path] URL", fix))
        return None
    shown = f"[{host}]" if ":" in host else host
    return f"https://{shown}{f':{port}' if port else ''}{parts.path.rstrip('/')}"


def _host(host: str) -> bool:
    """A DNS name or an IP address; no IPv6 zone (``%eth0``), which names a host interface."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return _dns_name(host)
    return "%" not in host


def _dns_name(name: Any) -> bool:
    if not isinstance(name, str) or not name or len(name) > 253:
        return False
    labels = name.removesuffix(".").split(".")
    return all(_HOST_LABEL.fullmatch(label) for label in labels) and not labels[-1].isdigit()


def _base64(value: Any, path: str, fix: str, problems: list[Problem]) -> bytes | None:
    if not isinstance(value, str) or not value.strip():
        problems.append(Problem(path, "is missing or not a base64 string", fix))
        return None
    try:
        return base64.b64decode("".join(value.split()), validate=True)
    except (binascii.Error, ValueError):
        problems.append(Problem(path, "is not valid base64", fix))
        return None


def _pem_certificates(
    value: Any, path: str, fix: str, problems: list[Problem]
) -> list[x509.Certificate] | None:
    data = _base64(value, path, fix, problems)
    if data is None:
        return None
    try:
        return x509.load_pem_x509_certificates(data)
    except ValueError:
        problems.append(Problem(path, "holds no valid PEM certificate", fix))
        return None


def _pem_private_key(value: Any, path: str, problems: list[Problem]) -> Any:
    fix = "put the base64 of the unencrypted PEM private key there"
    data = _base64(value, path, fix, problems)
    if data is None:
        return None
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:
        problems.append(Problem(path, "is an encrypted key", fix))
    except (ValueError, UnsupportedAlgorithm):
        problems.append(Problem(path, "holds no valid PEM private key", fix))
    return None


def _refused(where: str, problem: str, fix: str) -> KubeconfigRefused:
    return KubeconfigRefused([Problem(where, problem, fix)])


# -- the client (I/O) -------------------------------------------------------------------------


def api_client(kubeconfig: TenantKubeconfig) -> client.ApiClient:
    """An ApiClient that trusts only the kubeconfig's CA and sends only its credentials.

    The client's Configuration takes client certificates as file paths only, which urllib3 loads
    on every new connection. Instead the TLS context is built here, once: the CA from memory, the
    certificate and key from owner-only files in a private directory that is removed at once, and
    that context is handed to the client's connection pools.
    """
    configuration = client.Configuration(host=kubeconfig.server)
    configuration.verify_ssl = True
    # Also in the Configuration: a client built from it anew still trusts only this CA.
    configuration.ca_cert_data = kubeconfig.ca_pem.decode()
    configuration.tls_server_name = kubeconfig.tls_server_name
    # Never follow a redirect: the tenant's server could send the client to any plain-http
    # address inside the reconciler's network and read the answer back from the error it becomes.
    configuration.retries = urllib3.Retry(total=3, redirect=False)
    if kubeconfig.token is not None:
        configuration.api_key["BearerToken"] = f"Bearer {kubeconfig.token}"
    context = ssl.create_default_context(cadata=kubeconfig.ca_pem.decode())
    if kubeconfig.client_cert_pem is not None and kubeconfig.client_key_pem is not None:
        with _private_files(kubeconfig.client_cert_pem, kubeconfig.client_key_pem) as (cert, key):
            context.load_cert_chain(cert, key)
    api = client.ApiClient(configuration)
    api.rest_client.pool_manager.connection_pool_kw["ssl_context"] = context
    return api


@contextmanager
def _private_files(*contents: bytes) -> Iterator[tuple[str, ...]]:
    """Files only the owner can read, in a directory of their own, gone when the block ends."""
    directory = tempfile.mkdtemp(prefix="klutch-tenant-")  # mode 0700
    try:
        paths = []
        for index, content in enumerate(contents):
            path = os.path.join(directory, str(index))
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(content)
            paths.append(path)
        yield tuple(paths)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
