"""The checks of single values in a tenant kubeconfig: the server URL, DNS names, base64 and the
PEM certificates and keys inside it. Each records a Problem and returns None when refused."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization

from klutch_gitops.tenant_kubeconfig.problems import INLINE_CREDENTIALS, Problem

_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_PATH = re.compile(r"(/[A-Za-z0-9._~%!$&'()*+,;=:@-]*)*")


def server(value: Any, path: str, problems: list[Problem]) -> str | None:
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
        return dns_name(host)
    return "%" not in host


def dns_name(name: Any) -> bool:
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


def pem_certificates(
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


def pem_private_key(value: Any, path: str, problems: list[Problem]) -> Any:
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
