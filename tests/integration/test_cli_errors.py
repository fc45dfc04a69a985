"""Every wrong input a person can give klutch-gitops or its config: one error naming the file,
the field and the fix, exit code 1 (2 for wrong usage, as click and ``plan`` have it), never a
traceback. Each case runs the real command line as a subprocess; the clusters are real too: a
closed port, and the stack's Control Plane for credentials it refuses."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import certifi
import pytest
import yaml

from klutch_gitops.dev.localstack.stack import StackInfo

CLI = [sys.executable, "-m", "klutch_gitops.cli"]


def cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *map(str, args)], capture_output=True, text=True, timeout=120, cwd=cwd, check=False
    )


def assert_error(result: subprocess.CompletedProcess[str], code: int, *needles: str) -> None:
    """Exit ``code``, every needle in stderr, and no traceback anywhere."""
    output = result.stdout + result.stderr
    assert result.returncode == code, output
    assert "Traceback" not in output, output
    for needle in needles:
        assert needle in result.stderr, f"{needle!r} not in:\n{result.stderr}"


def kubeconfig(server: str, *, current: str | None = "x") -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            **({"current-context": current} if current else {}),
        }
    )


def config(kubeconfig_path: str, repositories: str = "[]") -> str:
    return f"controlPlane: {{kubeconfig: {kubeconfig_path}}}\nrepositories: {repositories}\n"


@pytest.fixture(scope="module")
def closed_port() -> Iterator[int]:
    """A port nothing listens on: bound but never listening, so connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def closed(tmp_path: Path, closed_port: int) -> Path:
    """A config whose Control Plane kubeconfig points at the closed port."""
    (tmp_path / "cp.kubeconfig").write_text(kubeconfig(f"https://127.0.0.1:{closed_port}"))
    (tmp_path / "config.yaml").write_text(config("cp.kubeconfig"))
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ["run", "-c", "config.yaml"],
        ["bind-api", "-c", "config.yaml"],
        ["local-provider", "--kubeconfig", "cp.kubeconfig"],
    ],
)
def test_a_wrong_log_level_lists_the_choices(tmp_path: Path, command: list[str]) -> None:
    result = cli(*command, "--log-level", "verbose", cwd=tmp_path)
    assert_error(result, 2, "--log-level", "'debug', 'info', 'warning', 'error'")


@pytest.mark.parametrize(
    ("setup", "needles"),
    [
        ("missing", ["cannot read config config.yaml: No such file", "--config"]),
        ("directory", ["config.yaml: Is a directory", "--config"]),
        ("not-yaml", ["config.yaml: not valid YAML: line ", "fix the YAML syntax"]),
        ("binary", ["config.yaml is not UTF-8 text", "--config"]),
        ("no-control-plane", ["config.yaml", "controlPlane: is required", "{kubeconfig: FILE}"]),
    ],
)
def test_a_broken_config_file(tmp_path: Path, setup: str, needles: list[str]) -> None:
    path = tmp_path / "config.yaml"
    if setup == "directory":
        path.mkdir()
    elif setup == "not-yaml":
        path.write_text("controlPlane: [\n")
    elif setup == "binary":
        path.write_bytes(b"\xff\xfe\x00")
    elif setup == "no-control-plane":
        path.write_text("repositories: []\n")
    for command in (["run", "-c", "config.yaml"], ["run", "--once", "-c", "config.yaml"]):
        assert_error(cli(*command, cwd=tmp_path), 1, *needles)
    assert_error(cli("bind-api", "-c", "config.yaml", cwd=tmp_path), 1, "config.yaml")


@pytest.mark.parametrize(
    ("setup", "needles"),
    [
        ("missing", ["cannot read kubeconfig", "cp.kubeconfig: No such file", "fix:"]),
        ("directory", ["cp.kubeconfig: Is a directory"]),
        (
            "not-yaml",
            ["cp.kubeconfig is not valid YAML: line 2, column 1: expected"],
        ),
        ("no-clusters", ["cp.kubeconfig holds no clusters"]),
        ("no-current-context", ["has no current-context", "use-context"]),
    ],
)
def test_a_broken_control_plane_kubeconfig(tmp_path: Path, setup: str, needles: list[str]) -> None:
    """The issue's first case: the error names the config, the field and the kubeconfig file."""
    path = tmp_path / "cp.kubeconfig"
    if setup == "directory":
        path.mkdir()
    elif setup == "not-yaml":
        path.write_text("clusters: [\n")
    elif setup == "no-clusters":
        path.write_text("apiVersion: v1\nkind: Config\n")
    elif setup == "no-current-context":
        path.write_text(kubeconfig("https://127.0.0.1:6443", current=None))
    (tmp_path / "config.yaml").write_text(config("cp.kubeconfig"))
    field = "config.yaml: controlPlane.kubeconfig: "
    for command in (
        ["run", "-c", "config.yaml"],
        ["run", "--once", "-c", "config.yaml"],
        ["plan", "--base", "main", "--head", "main", "-c", "config.yaml"],
    ):
        assert_error(cli(*command, cwd=tmp_path), 2 if command[0] == "plan" else 1, field)
    assert_error(cli("run", "-c", "config.yaml", cwd=tmp_path), 1, *needles)
    local = cli("local-provider", "--kubeconfig", "cp.kubeconfig", cwd=tmp_path)
    assert_error(local, 1, "--kubeconfig: ", *needles)


@pytest.mark.parametrize(
    ("command", "code"),
    [
        (["run", "-c", "config.yaml"], 1),
        (["run", "--once", "-c", "config.yaml"], 1),
        (["plan", "--base", "main", "--head", "main", "-c", "config.yaml"], 2),
    ],
)
def test_an_unreachable_control_plane_at_start(
    closed: Path, closed_port: int, command: list[str], code: int
) -> None:
    """The issue's second case: server URL, kubeconfig file, field and fix, in one error."""
    result = cli(*command, cwd=closed)
    assert_error(
        result,
        code,
        "config.yaml: controlPlane.kubeconfig: ",
        f"cannot reach https://127.0.0.1:{closed_port} (kubeconfig cp.kubeconfig)",
        "Connection refused",
        "fix: start the cluster, or fix the server URL in cp.kubeconfig",
    )
    assert "Retrying" not in result.stderr  # urllib3's retries are not the person's business


def test_an_unreachable_cluster_named_on_the_command_line(closed: Path, closed_port: int) -> None:
    server = f"cannot reach https://127.0.0.1:{closed_port} (kubeconfig cp.kubeconfig)"
    local = cli("local-provider", "--kubeconfig", "cp.kubeconfig", cwd=closed)
    assert_error(local, 1, f"--kubeconfig: {server}")
    plan = cli(
        "plan",
        "--base",
        "main",
        "--head",
        "main",
        "--control-plane-kubeconfig",
        "cp.kubeconfig",
        "--consumer-namespace",
        "cluster-a",
        cwd=closed,
    )
    assert_error(plan, 2, f"--control-plane-kubeconfig: {server}")


def test_an_unreadable_password_file_names_the_option(closed: Path) -> None:
    result = cli(
        "local-provider",
        "--kubeconfig",
        "cp.kubeconfig",
        "--postgres-host",
        "127.0.0.1",
        "--postgres-password-file",
        "nope",
        cwd=closed,
    )
    assert_error(result, 1, "--postgres-password-file: cannot read nope", "readable file")


def control_plane_copy(stack: StackInfo, path: Path, *, user: dict, cluster: dict) -> None:
    """The stack's Control Plane kubeconfig with the user and cluster fields changed."""
    kubeconfig = yaml.safe_load(Path(stack.clusters["control-plane"].kubeconfig).read_text())
    for entry in kubeconfig["users"]:
        entry["user"] = user
    for entry in kubeconfig["clusters"]:
        entry["cluster"].update(cluster)
    path.write_text(yaml.safe_dump(kubeconfig))


def test_credentials_the_control_plane_refuses(tmp_path: Path, stack: StackInfo) -> None:
    """A reachable Control Plane that does not know the kubeconfig's token: 401 at start."""
    control_plane_copy(stack, tmp_path / "cp.kubeconfig", user={"token": "not-a-token"}, cluster={})
    (tmp_path / "config.yaml").write_text(config("cp.kubeconfig"))
    result = cli("run", "-c", "config.yaml", cwd=tmp_path)
    assert_error(
        result,
        1,
        "config.yaml: controlPlane.kubeconfig: ",
        "refused the credentials of kubeconfig cp.kubeconfig: 401",
        "fix: renew the credentials in cp.kubeconfig",
    )


def test_a_control_plane_certificate_not_trusted(tmp_path: Path, stack: StackInfo) -> None:
    """The kubeconfig trusts other CAs (here: the public ones) than the one that signed the
    Control Plane's certificate."""
    public = base64.b64encode(Path(certifi.where()).read_bytes()).decode()
    control_plane_copy(
        stack,
        tmp_path / "cp.kubeconfig",
        user={"token": "t"},
        cluster={"certificate-authority-data": public},
    )
    (tmp_path / "config.yaml").write_text(config("cp.kubeconfig"))
    result = cli("run", "-c", "config.yaml", cwd=tmp_path)
    assert_error(
        result,
        1,
        f"cannot reach {stack.clusters['control-plane'].url} (kubeconfig cp.kubeconfig)",
        "(kubeconfig cp.kubeconfig): [SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed",
        "fix: fix certificate-authority(-data) of the cluster in cp.kubeconfig",
    )


def test_a_missing_app_cluster_kubeconfig(tmp_path: Path, stack: StackInfo) -> None:
    """A registration's App Cluster kubeconfig file is missing: that repository fails, named,
    with the file; the Control Plane's is fine, so the reconciler itself starts."""
    repositories = (
        "\n  - name: team-a\n    url: file:///nowhere.git\n    consumerNamespace: cluster-a\n"
        "    appNamespaces: [team-a]\n    appCluster: {kubeconfig: app.kubeconfig}\n"
        "    controlPlane: {kubeconfig: app.kubeconfig}\n"
    )
    (tmp_path / "config.yaml").write_text(
        config(stack.clusters["control-plane"].kubeconfig, repositories)
    )
    result = cli("run", "--once", "-c", "config.yaml", cwd=tmp_path)
    assert_error(
        result, 1, "repository team-a: App Cluster kubeconfig", "app.kubeconfig: No such file"
    )


@pytest.mark.parametrize(
    ("files", "needles"),
    [
        ({"ca.crt": ""}, ["bind.yaml: oidc.ca: cannot load CA certificates from ca.crt"]),
        ({}, ["bind.yaml: oidc.ca: ", "ca.crt: No such file", "PEM file of CA certificates"]),
        (
            {"ca.crt": "public CAs", "tls.key": ""},
            ["bind.yaml: tls: cannot load the certificate tls.crt", "No such file"],
        ),
    ],
)
def test_bind_api_certificate_files(
    closed: Path, files: dict[str, str], needles: list[str]
) -> None:
    """ssl's own errors name no file (a missing CA raises FileNotFoundError without one)."""
    for name, text in files.items():
        path = closed / name
        if text == "public CAs":
            path.write_bytes(Path(certifi.where()).read_bytes())
        else:
            path.write_text(text)
    (closed / "bind.yaml").write_text(
        "controlPlane: {kubeconfig: cp.kubeconfig}\nlisten: 127.0.0.1:0\n"
        "tls: {certFile: tls.crt, keyFile: tls.key}\n"
        "oidc: {issuer: https://127.0.0.1:1/dex, audiences: [klutch-bind], ca: ca.crt}\n"
    )
    assert_error(cli("bind-api", "-c", "bind.yaml", cwd=closed), 1, *needles)


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(
    "listen", ["busy", "127.0.0.1:99999", "127.0.0.1:http", "no-such-host.invalid:8080"]
)
def test_bind_api_listen_address(closed: Path, busy_port: int, listen: str) -> None:
    listen = f"127.0.0.1:{busy_port}" if listen == "busy" else listen
    (closed / "bind.yaml").write_text(
        f"controlPlane: {{kubeconfig: cp.kubeconfig}}\nlisten: '{listen}'\n"
        "oidc: {issuer: https://127.0.0.1:1/dex, audiences: [klutch-bind]}\n"
    )
    result = cli("bind-api", "-c", "bind.yaml", cwd=closed)
    assert_error(result, 1, "bind.yaml: listen: ", listen)


def test_the_reconciler_refuses_a_port_in_use(
    tmp_path: Path, stack: StackInfo, busy_port: int
) -> None:
    """Before, uvicorn's thread logged the bind error and the reconciler ran on without health
    checks, metrics or webhooks, saying it served them."""
    (tmp_path / "config.yaml").write_text(
        config(stack.clusters["control-plane"].kubeconfig) + f"listen: 127.0.0.1:{busy_port}\n"
    )
    result = cli("run", "-c", "config.yaml", cwd=tmp_path)
    assert_error(
        result,
        1,
        f"config.yaml: listen: cannot listen on 127.0.0.1:{busy_port}: Address already in use",
        "choose a free port",
    )


@pytest.mark.parametrize(
    ("option", "needle"),
    [
        ("--pg-bin-dir", "config.yaml holds no executable pg_dump, pg_restore"),
        ("--backup-dir", "config.yaml is not a directory"),
    ],
)
def test_local_provider_directories(closed: Path, option: str, needle: str) -> None:
    result = cli(
        "local-provider", "--kubeconfig", "cp.kubeconfig", option, "config.yaml", cwd=closed
    )
    assert_error(result, 1, f"{option}: ", needle)
