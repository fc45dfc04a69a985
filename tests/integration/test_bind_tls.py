"""The bind API over TLS (``tls: {certFile, keyFile}``) and ``klutch-bind --ca`` against it."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography import x509

from bind_api.config import load_bind_api_config
from bind_api.server import build_server
from klutch_gitops.dev.localstack.pki import Pki
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo

from .bindapi import API, cli, dev_id_token, offered_api, serving, token_args


@pytest.fixture(scope="module")
def pki(stack: StackInfo) -> Pki:
    return Pki(Path(stack.pki))


@pytest.fixture(scope="module")
def https_url(
    stack: StackInfo, clusters, pki: Pki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The bind API from a config file with ``tls``, serving the stack's certificate."""
    path = tmp_path_factory.mktemp("bind-tls") / "bind-api.yaml"
    path.write_text(
        f"""
controlPlane: {{kubeconfig: {stack.clusters["control-plane"].kubeconfig}}}
listen: 127.0.0.1:{free_port()}
tls: {{certFile: {pki.serving_cert}, keyFile: {pki.serving_key}}}
oidc:
  issuer: {stack.dex.issuer}
  audiences: [{stack.dex.automation_client_id}]
  ca: {stack.dex.ca}
"""
    )
    config = load_bind_api_config(path)
    with (
        offered_api(clusters, "a-bindtls"),
        serving(build_server(config), str(pki.serving_ca)) as url,
    ):
        yield url


@pytest.fixture(scope="module")
def id_token(stack: StackInfo) -> str:
    return dev_id_token(stack)


def test_healthz_answers_over_https_with_the_configured_certificate(
    https_url: str, pki: Pki
) -> None:
    assert https_url.startswith("https://")
    trusted = ssl.create_default_context(cafile=str(pki.serving_ca))
    response = httpx.get(f"{https_url}/healthz", verify=trusted)
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}
    host, port = https_url.removeprefix("https://").split(":")
    served = x509.load_pem_x509_certificate(ssl.get_server_certificate((host, int(port))).encode())
    assert served == x509.load_pem_x509_certificate(pki.serving_cert.read_bytes())


def test_the_cli_lists_exports_over_https_with_the_ca(
    https_url: str, id_token: str, pki: Pki, tmp_path: Path
) -> None:
    result = cli(
        tmp_path, "exports", https_url, *token_args(tmp_path, id_token), "--ca", str(pki.serving_ca)
    )
    assert result.returncode == 0, result.stderr
    assert API in result.stdout


def test_without_the_ca_the_cli_names_the_certificate_problem_and_the_fix(
    https_url: str, id_token: str, tmp_path: Path
) -> None:
    result = cli(tmp_path, "exports", https_url, *token_args(tmp_path, id_token))
    assert result.returncode == 1
    assert f"the bind API's TLS certificate at {https_url} is not trusted" in result.stderr
    assert "fix: pass --ca FILE" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_an_unreadable_ca_file_is_a_clear_error(
    https_url: str, id_token: str, tmp_path: Path
) -> None:
    missing = tmp_path / "missing-ca.crt"
    result = cli(
        tmp_path, "exports", https_url, *token_args(tmp_path, id_token), "--ca", str(missing)
    )
    assert result.returncode == 1
    assert f"cannot use --ca {missing}" in result.stderr
    assert "Traceback" not in result.stderr


def test_plain_http_to_the_https_port_fails(https_url: str, id_token: str, tmp_path: Path) -> None:
    plain = https_url.replace("https://", "http://", 1)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{plain}/healthz")
    result = cli(tmp_path, "exports", plain, *token_args(tmp_path, id_token))
    assert result.returncode == 1
    assert f"cannot reach the bind API at {plain}" in result.stderr
    assert "use an https:// URL" in result.stderr
    assert "Traceback" not in result.stderr
