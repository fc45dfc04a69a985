"""The pure parts of 'errors, never tracebacks': which library errors a person's input explains,
how they read, and the kubeconfig checks before the kubernetes client's loader."""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path

import certifi
import pytest
import typer
import urllib3
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from klutch_gitops.cli import ExplainingTyper
from klutch_gitops.cli_errors import explain
from klutch_gitops.cli_options import LogLevel
from klutch_gitops.errors import KlutchError, short_reason, yaml_problem
from klutch_gitops.kube.client import KubeError, api_client, read_kubeconfig_file
from klutch_gitops.preflight import (
    ca_file,
    certificate_pair,
    directory,
    listen_address,
    programs,
    unreachable,
)
from klutch_gitops.preflight import refused as refused_by

REFUSED = (
    "<urllib3.connection.HTTPSConnection object at 0x7f>: Failed to establish a new "
    "connection: [Errno 111] Connection refused"
)


def refused() -> urllib3.exceptions.MaxRetryError:
    pool = urllib3.HTTPSConnectionPool("10.0.0.1", 6443)
    return urllib3.exceptions.MaxRetryError(pool, "/version", Exception(REFUSED))


def test_an_unreachable_server_names_its_url_and_the_plain_reason() -> None:
    explained = explain(refused())
    assert explained is not None
    assert explained.message == "cannot reach https://10.0.0.1:6443: Connection refused"
    assert "server URL in the kubeconfig" in explained.fix


@pytest.mark.parametrize(
    ("error", "start"),
    [
        (KubeError(403, "Forbidden", "secrets is forbidden"), "the API server refused a request"),
        (ConfigException("Invalid kube-config file."), "kubeconfig: Invalid kube-config file."),
        (FileNotFoundError(2, "No such file or directory", "/x/ca.crt"), "cannot use /x/ca.crt"),
    ],
)
def test_known_library_errors_are_explained(error: Exception, start: str) -> None:
    explained = explain(error)
    assert explained is not None
    assert explained.message.startswith(start)
    assert explained.fix


@pytest.mark.parametrize("error", [ValueError("a bug"), KeyError("x"), OSError("no file named")])
def test_a_bug_is_not_explained_away(error: Exception) -> None:
    """What no input explains keeps its traceback: hiding it would hide the bug."""
    assert explain(error) is None


@pytest.mark.parametrize(
    ("reason", "short"),
    [
        (REFUSED, "Connection refused"),
        ("<HTTPSConnection object at 0x1>: Read timed out.", "Read timed out."),
        (None, "no answer"),
    ],
)
def test_short_reason(reason: object, short: str) -> None:
    assert short_reason(reason) == short


def test_yaml_problem_is_one_line_with_its_place() -> None:
    with pytest.raises(yaml.YAMLError) as caught:
        yaml.safe_load("a: [\n")
    assert yaml_problem(caught.value) == (
        "line 2, column 1: expected the node content, but found '<stream end>'"
    )


def test_every_log_level_is_one_logging_knows() -> None:
    assert [level.value for level in LogLevel] == ["debug", "info", "warning", "error"]
    for level in LogLevel:
        assert isinstance(logging.getLevelName(level.value.upper()), int)


def kubeconfig(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    return path


GOOD = """
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a list\n", "holds no clusters"),
        ("clusters: [\n", "is not valid YAML: line 2, column 1"),
        (GOOD.replace("current-context: x", ""), "has no current-context"),
        (GOOD.replace("current-context: x", "current-context: y"), "has no context 'y'"),
    ],
)
def test_a_kubeconfig_is_checked_before_the_loader(tmp_path: Path, text: str, message: str) -> None:
    path = kubeconfig(tmp_path, text)
    with pytest.raises(KlutchError) as caught:
        api_client(path)
    assert str(path) in caught.value.message
    assert message in caught.value.message
    assert caught.value.fix


def test_a_context_that_is_not_there_lists_those_that_are(tmp_path: Path) -> None:
    with pytest.raises(KlutchError, match=r"has no context 'z' \(contexts: x\)"):
        read_kubeconfig_file(kubeconfig(tmp_path, GOOD), "z")


def test_a_good_kubeconfig_reaches_the_loader(tmp_path: Path) -> None:
    api = api_client(kubeconfig(tmp_path, GOOD))
    assert api.configuration.host == "https://127.0.0.1:6443"


def test_the_loaders_own_complaints_name_the_file(tmp_path: Path) -> None:
    """A context naming a cluster that is not there: only the kubernetes client's loader looks."""
    path = kubeconfig(tmp_path, GOOD.replace("{cluster: c,", "{cluster: gone,"))
    with pytest.raises(KlutchError) as caught:
        api_client(path)
    assert caught.value.message.startswith(f"kubeconfig {path}: ")
    assert "gone" in caught.value.message
    assert str(path) in caught.value.fix


def command_raising(error: Exception) -> typer.Typer:
    app = ExplainingTyper(pretty_exceptions_enable=False)

    @app.command()
    def boom() -> None:
        raise error

    return app


def test_every_command_has_its_library_errors_explained() -> None:
    with pytest.raises(KlutchError, match=r"cannot reach https://10\.0\.0\.1:6443"):
        command_raising(refused())([], standalone_mode=True)


def test_a_bug_in_a_command_keeps_its_traceback() -> None:
    with pytest.raises(ZeroDivisionError):
        command_raising(ZeroDivisionError())([], standalone_mode=True)


def test_a_free_listen_address_passes() -> None:
    listen_address("127.0.0.1:0", "listen")


def test_a_port_in_use_is_refused_before_the_server_starts() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(KlutchError, match=f"c.yaml: listen: cannot listen on 127.0.0.1:{port}"):
            listen_address(f"127.0.0.1:{port}", "c.yaml: listen")


@pytest.mark.parametrize("listen", ["127.0.0.1:", "127.0.0.1:http", "[::1]:65536"])
def test_a_listen_address_that_is_not_host_port(listen: str) -> None:
    with pytest.raises(KlutchError, match="is not host:port"):
        listen_address(listen, "listen")


def test_a_ca_file_that_holds_no_certificate(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("not a certificate")
    with pytest.raises(KlutchError, match=r"oidc.ca: cannot load CA certificates from .*ca.crt"):
        ca_file(tmp_path / "ca.crt", "oidc.ca")
    ca_file(Path(certifi.where()), "oidc.ca")
    ca_file(None, "oidc.ca")


def test_a_certificate_without_its_key(tmp_path: Path) -> None:
    (tmp_path / "tls.key").write_text("")
    with pytest.raises(KlutchError, match="tls: cannot load the certificate"):
        certificate_pair(tmp_path / "tls.crt", tmp_path / "tls.key", "tls")
    certificate_pair(None, None, "tls")


def test_an_untrusted_certificate_points_at_the_ca_not_the_url() -> None:
    ssl_error = urllib3.exceptions.SSLError(ssl.SSLCertVerificationError(1, "[SSL] verify failed"))
    error = urllib3.exceptions.MaxRetryError(None, "/version", ssl_error)
    explained = unreachable(error, "https://cp:6443", Path("cp.kubeconfig"), "c.yaml: f")
    assert explained.message.startswith("c.yaml: f: cannot reach https://cp:6443")
    assert "certificate-authority" in explained.fix
    assert "server URL" in unreachable(refused(), "https://cp", Path("k"), "f").fix


@pytest.mark.parametrize(
    ("status", "fix"), [(401, "renew the credentials in k"), (404, "Kubernetes API server")]
)
def test_an_answer_that_is_not_the_version(status: int, fix: str) -> None:
    error = ApiException(status=status, reason="No")
    assert fix in refused_by(error, "https://cp", Path("k"), "f").fix


def test_a_bin_directory_without_the_programs(tmp_path: Path) -> None:
    (tmp_path / "pg_dump").write_text("")
    (tmp_path / "pg_dump").chmod(0o755)
    (tmp_path / "pg_restore").write_text("")  # not executable
    with pytest.raises(KlutchError, match=r"holds no executable pg_restore\n"):
        programs(tmp_path, "--pg-bin-dir", ("pg_dump", "pg_restore"))
    (tmp_path / "pg_restore").chmod(0o755)
    programs(tmp_path, "--pg-bin-dir", ("pg_dump", "pg_restore"))


def test_a_directory_may_be_absent_but_not_a_file(tmp_path: Path) -> None:
    directory(tmp_path / "later", "--backup-dir")
    (tmp_path / "file").write_text("")
    with pytest.raises(KlutchError, match=r"--backup-dir: .*file is not a directory"):
        directory(tmp_path / "file", "--backup-dir")
