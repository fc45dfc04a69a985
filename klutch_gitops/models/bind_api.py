"""The bind API's config file (``examples/bind-api.yaml``) as one model; ``bind_api.config``
validates a file with it and builds the runtime ``BindApiConfig``."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from klutch_gitops.models.refs import OwnKubeconfig, OwnSecret
from klutch_gitops.models.types import (
    Checked,
    Listen,
    Name,
    Rule,
    Strict,
    Text,
    matching,
    problem,
)

DEFAULT_SCOPES = ("openid", "email", "profile", "groups")
DEFAULT_BINDINGS_PER_IDENTITY = 50
PREFIX_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?$"


def _issuer(value: str) -> tuple[str, str] | None:
    if value.startswith("https://") and len(value) > len("https://"):
        return None
    return f"{value!r} is not https", "tokens need an https issuer"


def _external_url(value: str) -> tuple[str, str] | None:
    if value.startswith(("https://", "http://")) and "?" not in value and "#" not in value:
        return None
    return (
        f"{value!r} is not an http(s) URL without query",
        "write it like https://bind.example.com; <externalURL>/callback must be the redirect URI "
        "registered for the client at the issuer",
    )


Issuer = Annotated[str, Checked(_issuer, {"pattern": r"^https://.+", "maxLength": 2048})]
ExternalURL = Annotated[
    str, Checked(_external_url, {"pattern": r"^https?://[^?#]+$", "maxLength": 2048})
]
Prefix = Annotated[
    str,
    matching(
        PREFIX_PATTERN,
        "use a DNS label of at most 20 characters, like cluster (consumer namespaces are "
        "<prefix>-<26 characters>)",
        max_length=20,
    ),
]


class Tls(Strict):
    """The certificate and key files: both, or neither for http."""

    cert_file: Text | None = Field(None, description="PEM certificate (chain) file.")
    key_file: Text | None = Field(None, description="PEM private key file.")

    def rules(self) -> list[Rule]:
        if (self.cert_file is None) == (self.key_file is None):
            return []
        return [
            (
                "",
                "needs both certFile and keyFile",
                "set both, or neither for http",
                ("certFile", "keyFile"),
            )
        ]


class Oidc(Strict):
    """The OIDC issuer whose tokens the bind API accepts."""

    issuer: Issuer = Field(description="The OIDC provider's https issuer URL.")
    audiences: Annotated[list[Text], Field(min_length=1)] = Field(
        description="Client IDs whose tokens the bind API accepts."
    )
    ca: Text | None = Field(None, description="PEM file of the CA certificates of the issuer.")


class Browser(Strict):
    """Klutch's browser bind flow: the bind API is an OIDC client of its own."""

    external_url: ExternalURL = Field(
        alias="externalURL",
        description="Where browsers reach the bind API; <externalURL>/callback is the redirect "
        "URI registered with the issuer.",
    )
    client_id: Text = Field(description="The OIDC client ID of the bind API.")
    client_secret: OwnSecret = Field(description="The OIDC client secret: a file or a variable.")
    session_key: OwnSecret | None = Field(
        None,
        description="Signs the OAuth state and encrypts the session cookies; replicas share it. "
        "A random key per start when unset.",
    )
    scopes: list[Text] = Field(
        list(DEFAULT_SCOPES),
        description="Scopes to request, including openid (groups carry the authorisation).",
    )
    session_namespace: Name = Field(
        "default",
        description="The bind API's own namespace on the Control Plane: a Lease per used session.",
    )

    @field_validator("scopes")
    @classmethod
    def _openid(cls, scopes: list[str]) -> list[str]:
        if "openid" not in scopes:
            raise problem(
                "must be a list of scopes including openid",
                f"e.g. {list(DEFAULT_SCOPES)} (groups carry the authorisation)",
            )
        return scopes


class BindApiConfig(Strict):
    """The bind API's config file. Paths are relative to the file; secrets are references."""

    control_plane: OwnKubeconfig = Field(
        description="The bind API's own identity on the Control Plane."
    )
    listen: Listen = Field("127.0.0.1:8443", description="host:port to serve on.")
    tls: Tls = Field(
        default_factory=Tls,
        description="Serve https with these files; http without.",
        json_schema_extra={"default": {}},
    )
    oidc: Oidc = Field(description="The OIDC issuer of the tokens the bind API accepts.")
    default_allowed_groups: list[Text] = Field(
        default_factory=list,
        description='Groups that may bind the exports that name none; ["*"]: every caller.',
        json_schema_extra={"default": []},
    )
    consumer_namespace_prefix: Prefix = Field(
        "cluster", description="Consumer namespaces are <prefix>-<26 characters>."
    )
    bindings_per_identity: int = Field(
        DEFAULT_BINDINGS_PER_IDENTITY,
        ge=1,
        le=100_000,
        description="How many bindings one OIDC subject may hold; over it a bind is a 429.",
    )
    browser: Browser | None = Field(None, description="The browser bind flow; off when unset.")

    @field_validator("browser", mode="before")
    @classmethod
    def _empty_is_off(cls, value: object) -> object:
        return None if value == {} else value
