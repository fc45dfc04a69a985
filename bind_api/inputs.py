"""What the bind API accepts from a caller, checked before anything is created.

Each check returns the value or raises ``ValueError`` with a message that names the field and
the fix; the JSON API turns it into a 422, the browser flow into a 400 page.
"""

from __future__ import annotations

import re

# A cluster ID becomes half of the identity annotation ``<subject>#<cluster ID>``, so it must never
# hold '#'. Klutch's kubectl bind sends six base62 characters (bind/pkg/kubectl/bind/plugin/
# bind.go, ClusterID), klutch-bind the kube-system namespace's UID.
CLUSTER_ID = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,251}[A-Za-z0-9])?")
# Klutch's session IDs are six base62 characters (bind.go, SessionID); they are echoed back.
SESSION_ID = re.compile(r"[A-Za-z0-9._~-]{1,253}")
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
MAX_APP_NAMESPACES = 64
# The CLI's loopback callback, whole: http, a loopback host, a port, a plain path. Anything else
# (userinfo, a backslash, a fragment, spaces or control characters, other hosts) does not match.
CALLBACK = re.compile(
    r"http://(?P<host>localhost|127\.0\.0\.1|\[::1\]):(?P<port>[0-9]{1,5})"
    r"(?P<path>(/[A-Za-z0-9._~-]+)*/?)"
)
CALLBACK_FIX = (
    "a binding is only ever handed to the CLI on this machine: use "
    "http://localhost:<port>/callback or http://127.0.0.1:<port>/callback"
)


def cluster_id(value: str, field: str = "clusterId") -> str:
    if not CLUSTER_ID.fullmatch(value):
        raise ValueError(
            f"{field} {value[:80]!r} is not a cluster ID: use 1 to 253 letters, digits, '.', "
            "'_' and '-', starting and ending with a letter or digit (klutch-bind sends the "
            "App Cluster's kube-system namespace UID)"
        )
    return value


def session_id(value: str, field: str = "session_id") -> str:
    if not SESSION_ID.fullmatch(value):
        raise ValueError(
            f"{field} is not a session ID: use 1 to 253 letters, digits, '.', '_', '~' and '-'; "
            "open the URL the CLI printed"
        )
    return value


def app_namespaces(values: list[str], field: str = "repository.appNamespaces") -> list[str]:
    if len(values) > MAX_APP_NAMESPACES:
        raise ValueError(
            f"{field} lists {len(values)} namespaces, more than {MAX_APP_NAMESPACES}: "
            "bind the repository for the namespaces it writes to"
        )
    bad = [v for v in values if not DNS_LABEL.fullmatch(v)]
    if bad:
        raise ValueError(
            f"{field}: {', '.join(repr(b[:80]) for b in bad[:5])} "
            f"{'is not a namespace name' if len(bad) == 1 else 'are not namespace names'}: use "
            "at most 63 lowercase letters, digits and '-', starting and ending with a letter or "
            "digit (a DNS-1123 label)"
        )
    if len(set(values)) != len(values):
        raise ValueError(f"{field} names a namespace twice: list each once")
    return values


def port(value: str, field: str) -> int:
    if not value.isascii() or not value.isdigit() or not 0 < int(value) < 65536:
        raise ValueError(
            f"{field}={value[:20]!r} is not a port: use a number from 1 to 65535; "
            "start again from the CLI"
        )
    return int(value)


def loopback_callback(value: str, field: str = "redirect_url") -> str:
    """The callback URL rebuilt from its parts once the whole of it matched ``CALLBACK``."""
    match = CALLBACK.fullmatch(value)
    if match is None:
        raise ValueError(f"{field} {value[:200]!r} is not a loopback callback")
    number = port(match["port"], f"{field} port")
    return f"http://{match['host']}:{number}{match['path'] or '/'}"
