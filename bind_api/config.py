"""The bind API's configuration file, validated by ``models.bind_api`` like the reconciler's:
every problem at once, each with its path and fix."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.config import SecretRef
from klutch_gitops.models import bind_api as model
from klutch_gitops.models.bind_api import DEFAULT_BINDINGS_PER_IDENTITY, DEFAULT_SCOPES
from klutch_gitops.models.problems import parse_yaml, validate
from klutch_gitops.models.refs import resolve
from klutch_gitops.settings import read_config_file

FIX = "edit the bind API's config file and run again"


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


def parse_bind_api_config(text: str, origin: str, base: Path) -> BindApiConfig:
    """Parse and validate (``models.bind_api``); raise one KlutchError listing every problem."""
    data = validate(model.BindApiConfig, parse_yaml(text, origin), origin, FIX)
    browser = data.browser
    return BindApiConfig(
        control_plane_kubeconfig=resolve(base, data.control_plane.kubeconfig),
        issuer=data.oidc.issuer,
        audiences=tuple(data.oidc.audiences),
        issuer_ca=resolve(base, data.oidc.ca) if data.oidc.ca else None,
        listen=data.listen,
        tls_cert=resolve(base, data.tls.cert_file) if data.tls.cert_file else None,
        tls_key=resolve(base, data.tls.key_file) if data.tls.key_file else None,
        default_allowed_groups=tuple(data.default_allowed_groups),
        consumer_prefix=data.consumer_namespace_prefix,
        browser=BrowserFlow(
            external_url=browser.external_url.rstrip("/"),
            client_id=browser.client_id,
            client_secret=browser.client_secret.ref(base),
            session_key=browser.session_key.ref(base) if browser.session_key else None,
            scopes=tuple(browser.scopes),
            session_namespace=browser.session_namespace,
        )
        if browser
        else None,
        bindings_per_identity=data.bindings_per_identity,
    )


def load_bind_api_config(path: Path) -> BindApiConfig:
    return parse_bind_api_config(read_config_file(path), str(path), path.parent)
