"""The bind API's configuration file, validated like the reconciler's: every problem at once."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.config import SecretRef
from klutch_gitops.settings import NAME_PATTERN, FieldReader, read_config_file

DEFAULT_SCOPES = ("openid", "email", "profile", "groups")
DEFAULT_BINDINGS_PER_IDENTITY = 50
PREFIX_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$")


@dataclass(frozen=True)
class BrowserFlow:
    """Klutch's browser bind flow: the bind API is an OIDC client of its own.

    ``external_url`` is where browsers reach the bind API (its ``/callback`` is the redirect URI
    registered with the issuer). ``session_key`` signs the OAuth ``state`` and encrypts the
    session cookies; replicas behind one URL must share it. Without one, a random key is made at
    start-up, so a restart ends logins in progress. ``session_namespace`` holds, on the Control
    Plane, a Lease per bind session used, so a replayed ``POST /bind`` on any replica binds nothing.
    """

    external_url: str
    client_id: str
    client_secret: SecretRef
    session_key: SecretRef | None = None
    scopes: tuple[str, ...] = DEFAULT_SCOPES
    session_namespace: str = "default"


@dataclass(frozen=True)
class BindApiConfig:
    control_plane_kubeconfig: Path
    issuer: str
    audiences: tuple[str, ...]
    issuer_ca: Path | None = None
    listen: str = "127.0.0.1:8443"
    tls_cert: Path | None = None
    tls_key: Path | None = None
    default_allowed_groups: tuple[str, ...] = ()
    consumer_prefix: str = "cluster"
    browser: BrowserFlow | None = None
    bindings_per_identity: int = DEFAULT_BINDINGS_PER_IDENTITY


TOP_LEVEL = {
    "controlPlane",
    "listen",
    "tls",
    "oidc",
    "defaultAllowedGroups",
    "consumerNamespacePrefix",
    "browser",
    "bindingsPerIdentity",
}


def parse_bind_api_config(text: str, origin: str, base: Path) -> BindApiConfig:
    reader = FieldReader(origin, base)
    data = reader.mapping(reader.parse(text), "", TOP_LEVEL)
    control_plane = reader.own_kubeconfig(data.get("controlPlane"), "the bind API")
    issuer, audiences, ca = _oidc(reader, data.get("oidc"))
    cert, key = _tls(reader, data.get("tls"))
    groups = _allowed_groups(reader, data.get("defaultAllowedGroups", []))
    prefix = reader.string(
        data,
        "consumerNamespacePrefix",
        "",
        default="cluster",
        pattern=PREFIX_PATTERN,
        fix="use a DNS label of at most 20 characters, like cluster (consumer namespaces are "
        "<prefix>-<26 characters>)",
    )
    limit = _bindings_per_identity(
        reader, data.get("bindingsPerIdentity", DEFAULT_BINDINGS_PER_IDENTITY)
    )
    browser = _browser(reader, data.get("browser"))
    reader.check()
    assert control_plane is not None  # no problems means it was read
    assert issuer is not None
    return BindApiConfig(
        control_plane_kubeconfig=control_plane,
        issuer=issuer,
        audiences=audiences,
        issuer_ca=reader.path(ca) if ca else None,
        listen=reader.string(data, "listen", "") or "127.0.0.1:8443",
        tls_cert=reader.path(cert) if cert else None,
        tls_key=reader.path(key) if key else None,
        default_allowed_groups=groups,
        consumer_prefix=prefix or "cluster",
        browser=browser,
        bindings_per_identity=limit,
    )


def _oidc(reader: FieldReader, data: object) -> tuple[str | None, tuple[str, ...], str | None]:
    """The issuer (https), the accepted audiences and the issuer's CA file, if any."""
    oidc = reader.mapping(data, "oidc", {"issuer", "audiences", "ca"})
    issuer = reader.string(
        oidc,
        "issuer",
        "oidc",
        required=True,
        fix="set oidc.issuer to the OIDC provider's https issuer URL",
    )
    if issuer and not issuer.startswith("https://"):
        reader.problem("oidc.issuer", f"{issuer!r} is not https", "tokens need an https issuer")
    audiences = oidc.get("audiences")
    if (
        not isinstance(audiences, list)
        or not audiences
        or not all(isinstance(a, str) and a for a in audiences)
    ):
        reader.problem(
            "oidc.audiences",
            "must be a non-empty list of client IDs",
            "list the OIDC client IDs whose tokens the bind API accepts",
        )
        audiences = []
    return issuer, tuple(audiences), reader.string(oidc, "ca", "oidc")


def _tls(reader: FieldReader, data: object) -> tuple[str | None, str | None]:
    """The certificate and key files: both, or neither for http."""
    tls = reader.mapping(data, "tls", {"certFile", "keyFile"})
    cert, key = reader.string(tls, "certFile", "tls"), reader.string(tls, "keyFile", "tls")
    if bool(cert) != bool(key):
        reader.problem("tls", "needs both certFile and keyFile", "set both, or neither for http")
    return cert, key


def _allowed_groups(reader: FieldReader, groups: object) -> tuple[str, ...]:
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        reader.problem(
            "defaultAllowedGroups",
            "must be a list of group names",
            'e.g. [klutch-developers], or ["*"] for every authenticated caller',
        )
        return ()
    return tuple(groups)


def _bindings_per_identity(reader: FieldReader, limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        reader.problem(
            "bindingsPerIdentity",
            f"{limit!r} is not a positive whole number",
            f"set how many bindings one person may hold, e.g. {DEFAULT_BINDINGS_PER_IDENTITY}",
        )
        return DEFAULT_BINDINGS_PER_IDENTITY
    return limit


def _browser(reader: FieldReader, data: object) -> BrowserFlow | None:
    if data is None:
        return None
    where = "browser"
    browser = reader.mapping(
        data,
        where,
        {"externalURL", "clientId", "clientSecret", "sessionKey", "scopes", "sessionNamespace"},
    )
    if not browser:
        return None
    url = _external_url(reader, browser, where)
    client_id = reader.string(
        browser, "clientId", where, required=True, fix="set the OIDC client ID of the bind API"
    )
    secret = _own_secret(reader, browser.get("clientSecret"), f"{where}.clientSecret")
    if secret is None and "clientSecret" not in browser:
        reader.problem(
            f"{where}.clientSecret",
            "is required",
            "set {file: PATH} or {env: VARIABLE} holding the client secret",
        )
    scopes = _scopes(reader, browser.get("scopes", list(DEFAULT_SCOPES)), where)
    session_namespace = reader.string(
        browser,
        "sessionNamespace",
        where,
        default="default",
        pattern=NAME_PATTERN,
        fix="name the bind API's own namespace on the Control Plane",
    )
    if url is None or client_id is None or secret is None:
        return None
    return BrowserFlow(
        external_url=url.rstrip("/"),
        client_id=client_id,
        client_secret=secret,
        session_key=_own_secret(reader, browser.get("sessionKey"), f"{where}.sessionKey"),
        scopes=scopes,
        session_namespace=session_namespace or "default",
    )


def _external_url(reader: FieldReader, browser: dict, where: str) -> str | None:
    """Where browsers reach the bind API: http(s), no query, no fragment."""
    url = reader.string(
        browser,
        "externalURL",
        where,
        required=True,
        fix="set the URL browsers reach the bind API at, e.g. https://bind.example.com",
    )
    if url and (not url.startswith(("https://", "http://")) or "?" in url or "#" in url):
        reader.problem(
            f"{where}.externalURL",
            f"{url!r} is not an http(s) URL without query",
            "write it like https://bind.example.com; <externalURL>/callback must be the "
            "redirect URI registered for the client at the issuer",
        )
    return url


def _scopes(reader: FieldReader, scopes: object, where: str) -> tuple[str, ...]:
    if not isinstance(scopes, list) or "openid" not in scopes:
        reader.problem(
            f"{where}.scopes",
            "must be a list of scopes including openid",
            f"e.g. {list(DEFAULT_SCOPES)} (groups carry the authorisation)",
        )
        return DEFAULT_SCOPES
    return tuple(str(scope) for scope in scopes)


def _own_secret(reader: FieldReader, data: object, where: str) -> SecretRef | None:
    """A secret of the bind API itself: a file or an environment variable, never in the config."""
    ref = reader.secret_ref(data, where)
    if ref is not None and ref.file is None and ref.env is None:
        reader.problem(where, "must be a file or env reference", "use {file: PATH} or {env: NAME}")
        return None
    return ref


def load_bind_api_config(path: Path) -> BindApiConfig:
    return parse_bind_api_config(read_config_file(path), str(path), path.parent)
