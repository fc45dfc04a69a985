"""The bind API's configuration file, validated like the reconciler's: every problem at once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.config import NAME_PATTERN, FieldReader, read_config_file


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


def parse_bind_api_config(text: str, origin: str, base: Path) -> BindApiConfig:
    reader = FieldReader(origin, base)
    data = reader.mapping(
        reader.parse(text),
        "",
        {
            "controlPlane",
            "listen",
            "tls",
            "oidc",
            "defaultAllowedGroups",
            "consumerNamespacePrefix",
        },
    )
    control_plane = reader.own_kubeconfig(data.get("controlPlane"), "the bind API")
    oidc = reader.mapping(data.get("oidc"), "oidc", {"issuer", "audiences", "ca"})
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
    ca = reader.string(oidc, "ca", "oidc")
    tls = reader.mapping(data.get("tls"), "tls", {"certFile", "keyFile"})
    cert, key = reader.string(tls, "certFile", "tls"), reader.string(tls, "keyFile", "tls")
    if bool(cert) != bool(key):
        reader.problem("tls", "needs both certFile and keyFile", "set both, or neither for http")
    groups = data.get("defaultAllowedGroups", [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        reader.problem(
            "defaultAllowedGroups",
            "must be a list of group names",
            'e.g. [klutch-developers], or ["*"] for every authenticated caller',
        )
        groups = []
    prefix = reader.string(
        data,
        "consumerNamespacePrefix",
        "",
        default="cluster",
        pattern=NAME_PATTERN,
        fix="use a short DNS label like cluster",
    )
    reader.check()
    assert control_plane is not None  # no problems means it was read
    assert issuer is not None
    return BindApiConfig(
        control_plane_kubeconfig=control_plane,
        issuer=issuer,
        audiences=tuple(audiences),
        issuer_ca=reader.path(ca) if ca else None,
        listen=reader.string(data, "listen", "") or "127.0.0.1:8443",
        tls_cert=reader.path(cert) if cert else None,
        tls_key=reader.path(key) if key else None,
        default_allowed_groups=tuple(groups),
        consumer_prefix=prefix or "cluster",
    )


def load_bind_api_config(path: Path) -> BindApiConfig:
    return parse_bind_api_config(read_config_file(path), str(path), path.parent)
