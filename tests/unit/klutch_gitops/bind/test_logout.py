"""``klutch-bind logout`` revokes the refresh token where the issuer offers RFC 7009 revocation.

Dex offers none (its discovery document names no ``revocation_endpoint``: dexidp/dex#1778, "dex
does not support token revocation endpoint"), so the real RFC 7009 exchange is tested here against
a small local issuer over real HTTP; tests/integration/test_bind_login.py logs out of the real Dex.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs

import pytest

from klutch_gitops.bind import cli as bind_cli
from klutch_gitops.bind import token_cache
from klutch_gitops.bind.token_cache import Tokens
from klutch_gitops.errors import KlutchError


@dataclass
class Issuer:
    """An issuer with discovery and (when ``revocation``) an RFC 7009 endpoint."""

    url: str = ""
    revocation: bool = True
    status: int = 200
    revoked: list[dict[str, list[str]]] = field(default_factory=list)


@pytest.fixture
def issuer() -> Iterator[Issuer]:
    state = Issuer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            document = {
                "issuer": state.url,
                "authorization_endpoint": f"{state.url}/auth",
                "token_endpoint": f"{state.url}/token",
            }
            if state.revocation:
                document["revocation_endpoint"] = f"{state.url}/revoke"
            self._reply(200, json.dumps(document).encode())

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            assert self.path == "/revoke"
            assert self.headers["Content-Type"] == "application/x-www-form-urlencoded"
            state.revoked.append(parse_qs(body))
            self._reply(state.status, b"" if state.status == 200 else b'{"error":"busy"}')

        def _reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_port}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def config_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    return tmp_path


def log_in(issuer: Issuer, refresh_token: str | None = "refresh-1") -> Path:  # noqa: S107
    return token_cache.save(
        Tokens(
            issuer=issuer.url,
            client_id="klutch-bind",
            id_token="a.b.c",
            refresh_token=refresh_token,
            expires_at=9e12,
        )
    )


def test_logout_revokes_the_refresh_token_as_rfc_7009_says(
    issuer: Issuer, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = log_in(issuer)
    bind_cli.logout(issuer.url)
    assert issuer.revoked == [
        {
            "token": ["refresh-1"],
            "token_type_hint": ["refresh_token"],
            "client_id": ["klutch-bind"],
        }
    ]
    assert "the refresh token was revoked at the issuer" in capsys.readouterr().out
    assert not cache.exists()


def test_logout_says_plainly_when_the_issuer_cannot_revoke(
    issuer: Issuer, capsys: pytest.CaptureFixture[str]
) -> None:
    issuer.revocation = False
    cache = log_in(issuer)
    bind_cli.logout(issuer.url)
    said = " ".join(capsys.readouterr().out.split())
    assert "the issuer does not support token revocation" in said
    assert "no revocation_endpoint, RFC 7009" in said
    assert "stays valid there until it expires" in said
    assert issuer.revoked == []
    assert not cache.exists()


def test_a_failed_revocation_keeps_the_tokens_for_another_try(issuer: Issuer) -> None:
    issuer.status = 503
    cache = log_in(issuer)
    with pytest.raises(KlutchError) as failed:
        bind_cli.logout(issuer.url)
    assert "did not revoke the refresh token: busy; the tokens are kept" in failed.value.message
    assert str(cache) in failed.value.fix
    assert cache.exists()


def test_without_a_refresh_token_there_is_nothing_to_revoke(
    issuer: Issuer, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = log_in(issuer, refresh_token=None)
    bind_cli.logout(issuer.url)
    assert "there was no refresh token to revoke" in capsys.readouterr().out
    assert issuer.revoked == []
    assert not cache.exists()
