"""``klutch-bind`` remembers, per kubectl context, the bind API, issuer and client of a login
(``$XDG_CONFIG_HOME/klutch-bind/config.yaml``, 0600, never a token), as ``argocd login`` keeps
servers and contexts in argoproj/argo-cd ``util/localconfig/localconfig.go`` (owner-only:
``util/localconfig/file_perm_unix.go``); explicit flags win; tokens come from ``--token-file``,
``$KLUTCH_BIND_TOKEN`` or the token cache, never from argv."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from klutch_gitops.bind import contexts, token_cache
from klutch_gitops.bind.cli import app
from klutch_gitops.bind.login_commands import _wanted_login
from klutch_gitops.bind.options import TOKEN_ENV, given_token, open_client, target
from klutch_gitops.bind.unbind import _url_and_consumer
from klutch_gitops.errors import KlutchError

URL = "https://bind.example.com"
ISSUER = "https://dex.example.com"
LOGIN = contexts.Login("kind-app", URL, ISSUER, "klutch-bind", "/ca/dex.pem", "/ca/bind.pem")


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config home and a kubeconfig whose current context is kind-app."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({"current-context": "kind-app", "contexts": []}))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return tmp_path


def test_a_login_is_remembered_owner_only_and_without_tokens(home: Path) -> None:
    path = contexts.remember(LOGIN)
    assert path == home / "config" / "klutch-bind" / "config.yaml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = yaml.safe_load(path.read_text())
    assert data == {
        "contexts": [
            {
                "context": "kind-app",
                "server": URL,
                "issuer": ISSUER,
                "clientId": "klutch-bind",
                "issuerCa": "/ca/dex.pem",
                "apiCa": "/ca/bind.pem",
            }
        ]
    }
    assert "token" not in path.read_text().lower().replace("tokens: those", "")
    other = contexts.Login("prod", "https://bind.prod", ISSUER, "klutch-bind")
    contexts.remember(other)
    contexts.remember(LOGIN)  # replaces, does not add
    assert contexts.load() == [LOGIN, other]  # sorted by context
    assert contexts.forget("prod") == other
    assert contexts.forget("prod") is None
    assert contexts.load() == [LOGIN]


def test_a_file_that_is_not_ours_names_itself(home: Path) -> None:
    path = contexts.config_path()
    path.parent.mkdir(parents=True)
    path.write_text("contexts: [{context: a, server: https://b, isuer: https://c}]\n")
    with pytest.raises(KlutchError, match="unknown keys") as raised:
        contexts.load()
    assert str(path) in raised.value.message


def test_remembered_settings_fill_what_the_flags_leave_out(home: Path) -> None:
    contexts.remember(LOGIN)
    chosen = target(None, None, None, None, None, None)
    assert (chosen.url, chosen.issuer, chosen.client_id, chosen.ca) == (
        URL,
        ISSUER,
        "klutch-bind",
        "/ca/bind.pem",
    )
    flags = target(URL, "https://other-issuer", "cli", "/my/ca", None, None)
    assert (flags.issuer, flags.client_id, flags.ca) == ("https://other-issuer", "cli", "/my/ca")
    assert target(URL, None, "mine", None, None, None).client_id == "mine"


def test_another_url_or_context_without_a_login_is_an_error_naming_it(home: Path) -> None:
    contexts.remember(LOGIN)
    with pytest.raises(KlutchError, match="no login for https://elsewhere") as raised:
        target("https://elsewhere", None, None, None, None, None)
    assert "kubectl context kind-app" in raised.value.message
    assert "klutch-bind login URL" in raised.value.fix
    with pytest.raises(KlutchError, match="no bind API URL remembered for kubectl context prod"):
        target(None, None, None, None, None, "prod")
    # a token from a file or the environment needs no issuer, so nothing is looked up
    assert target("https://elsewhere", None, None, None, None, None, need_issuer=False).url


def test_the_token_comes_from_a_file_or_the_environment(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert given_token(None) is None
    monkeypatch.setenv(TOKEN_ENV, "from-env\n")
    assert given_token(None) == "from-env"
    token_file = home / "token"
    token_file.write_text("from-file\n")
    assert given_token(token_file) == "from-file"  # the file wins
    token_file.write_text("\n")
    with pytest.raises(KlutchError, match="is empty"):
        given_token(token_file)
    with pytest.raises(KlutchError, match="cannot read --token-file"):
        given_token(home / "missing")


def test_a_client_uses_the_remembered_login_and_its_cached_token(home: Path) -> None:
    contexts.remember(contexts.Login("kind-app", URL, ISSUER, "klutch-bind"))
    with pytest.raises(KlutchError, match=f"not logged in to {ISSUER}"):
        open_client(None, None, None, None, None)
    body = {"id_token": unsigned_jwt({"exp": time.time() + 3600})}
    token_cache.save(token_cache.tokens_from_response(ISSUER, "klutch-bind", None, body))
    with open_client(None, None, None, None, None) as api:
        assert api.base_url == URL
        assert api.http.headers["Authorization"] == f"Bearer {body['id_token']}"


def unsigned_jwt(claims: dict) -> str:
    import base64

    def part(data: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part(claims)}.sig"


def test_login_completes_its_flags_from_the_remembered_login(home: Path) -> None:
    contexts.remember(LOGIN)
    again = _wanted_login(None, None, None, None, None, None, None)
    assert again == LOGIN  # 'klutch-bind login' alone logs in again, the same way
    other = _wanted_login("https://new", ISSUER, "cli", None, None, None, None)
    assert other == contexts.Login("kind-app", "https://new", ISSUER, "cli")
    bare = _wanted_login(None, ISSUER, "cli", None, None, None, None)
    assert bare.url == ""  # logs in, remembers nothing (the URL is unknown)
    with pytest.raises(KlutchError, match="needs --issuer") as raised:
        _wanted_login(URL, None, "cli", None, None, None, "prod")
    assert "kubectl context prod" in raised.value.message
    first = _wanted_login(URL, ISSUER, None, None, None, None, "prod")
    assert first == contexts.Login("prod", URL, ISSUER, "klutch-bind")  # the CLI's usual client


def test_config_view_shows_the_logins_and_marks_the_current_context(home: Path) -> None:
    runner = CliRunner()
    empty = runner.invoke(app, ["config", "view"])
    assert empty.exit_code == 0, empty.output
    assert "nothing remembered" in empty.output
    contexts.remember(LOGIN)
    contexts.remember(contexts.Login("prod", "https://bind.prod", ISSUER, "cli"))
    table = runner.invoke(app, ["config", "view"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split() == ["CURRENT", "CONTEXT", "SERVER", "ISSUER", "CLIENT"]
    assert lines[1].split() == ["*", "kind-app", URL, ISSUER, "klutch-bind"]
    assert lines[2].split() == ["prod", "https://bind.prod", ISSUER, "cli"]
    data = json.loads(
        runner.invoke(app, ["config", "view", "-o", "json", "--context", "prod"]).output
    )
    assert data["current-context"] == "prod"
    assert [c["context"] for c in data["contexts"]] == ["kind-app", "prod"]


def test_unbind_takes_the_url_or_leaves_it_to_the_login() -> None:
    assert _url_and_consumer(["team-a-x"]) == (None, "team-a-x")
    assert _url_and_consumer([URL, "team-a-x"]) == (URL, "team-a-x")
    for wrong in ([], [URL, "a", "b"]):
        with pytest.raises(typer.BadParameter, match="expected \\[URL\\] CONSUMER"):
            _url_and_consumer(wrong)
    with pytest.raises(typer.BadParameter, match="not an http"):
        _url_and_consumer(["bind.example.com", "team-a-x"])


def test_a_status_without_url_or_login_says_to_log_in(home: Path) -> None:
    result = CliRunner().invoke(app, ["status"])
    assert result.exit_code == 1
    assert isinstance(result.exception, KlutchError)
    assert "no bind API URL remembered for kubectl context kind-app" in result.exception.message
