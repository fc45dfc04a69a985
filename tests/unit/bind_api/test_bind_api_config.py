"""The bind API's config: validated with field paths and fixes, like the reconciler's."""

from __future__ import annotations

from pathlib import Path

import pytest

from bind_api.config import parse_bind_api_config
from klutch_gitops.errors import KlutchError

GOOD = """
controlPlane: {kubeconfig: cp.kubeconfig}
listen: 0.0.0.0:8443
tls: {certFile: tls.crt, keyFile: tls.key}
oidc:
  issuer: https://dex.example.com/dex
  audiences: [klutch-bind, klutch-gitops]
  ca: ca.crt
defaultAllowedGroups: [klutch-developers]
"""


def test_a_good_config(tmp_path: Path) -> None:
    config = parse_bind_api_config(GOOD, "bind.yaml", tmp_path)
    assert config.control_plane_kubeconfig == tmp_path / "cp.kubeconfig"
    assert config.audiences == ("klutch-bind", "klutch-gitops")
    assert config.issuer_ca == tmp_path / "ca.crt"
    assert (config.tls_cert, config.tls_key) == (tmp_path / "tls.crt", tmp_path / "tls.key")
    assert config.default_allowed_groups == ("klutch-developers",)
    assert config.consumer_prefix == "cluster"
    assert config.bindings_per_identity == 50


def test_every_problem_at_once(tmp_path: Path) -> None:
    bad = """
controlPlane: {kubeconfigSecretRef: {name: x}}
tls: {certFile: tls.crt}
oidc: {issuer: http://dex.example.com, audiences: []}
defaultAllowedGroups: everyone
consumerNamespacePrefix: a-prefix-longer-than-twenty
bindingsPerIdentity: 0
browser: {externalURL: https://b.example, clientId: web, clientSecret: {env: S},
          sessionNamespace: Not_A_Namespace}
extra: 1
"""
    with pytest.raises(KlutchError) as raised:
        parse_bind_api_config(bad, "bind.yaml", tmp_path)
    text = str(raised.value)
    for expected in (
        "controlPlane.kubeconfig: is required — name the service's own kubeconfig file",
        "controlPlane.kubeconfigSecretRef: unknown field",
        "tls: needs both certFile and keyFile",
        "oidc.issuer: 'http://dex.example.com' is not https",
        "oidc.audiences: must be a non-empty list",
        "defaultAllowedGroups: must be a list",
        "consumerNamespacePrefix: 'a-prefix-longer-than-twenty' is longer than 20 characters",
        "use a DNS label of at most 20 characters",
        "bindingsPerIdentity: 0 is not a number from 1 to 100000",
        "browser.sessionNamespace: 'Not_A_Namespace' is not valid",
        "extra: unknown field",
    ):
        assert expected in text, expected


def test_the_browser_flow_reads_its_secrets_from_files_or_the_environment(tmp_path: Path) -> None:
    text = (
        GOOD
        + """browser:
  externalURL: https://bind.example.com/
  clientId: klutch-bind-web
  clientSecret: {file: web-secret}
  sessionKey: {env: KLUTCH_BIND_SESSION_KEY}
"""
    )
    browser = parse_bind_api_config(text, "bind.yaml", tmp_path).browser
    assert browser is not None
    assert browser.external_url == "https://bind.example.com"
    assert browser.client_secret.file == tmp_path / "web-secret"
    assert browser.session_key is not None
    assert browser.session_key.env == "KLUTCH_BIND_SESSION_KEY"
    assert "openid" in browser.scopes


def test_browser_flow_problems_are_reported_with_the_rest(tmp_path: Path) -> None:
    bad = (
        GOOD
        + """browser:
  externalURL: bind.example.com
  clientSecret: {secretRef: {name: s, key: k}}
  scopes: [email]
  extra: 1
"""
    )
    with pytest.raises(KlutchError) as raised:
        parse_bind_api_config(bad, "bind.yaml", tmp_path)
    text = str(raised.value)
    for expected in (
        "browser.externalURL: 'bind.example.com' is not an http(s) URL",
        "browser.clientId: is required",
        "browser.clientSecret.secretRef: unknown field — remove it; known fields here: env, file",
        "browser.scopes: must be a list of scopes including openid",
        "browser.extra: unknown field",
    ):
        assert expected in text, expected


def test_the_documented_example_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[3] / "examples" / "bind-api.yaml"
    config = parse_bind_api_config(example.read_text(), str(example), example.parent)
    assert config.browser is not None
    assert config.browser.session_namespace == "klutch-system"
    assert config.tls_cert == Path("/etc/klutch-gitops/tls/tls.crt")
