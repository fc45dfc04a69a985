"""Options and commands every command line of klutch-gitops takes alike: ``--log-level``,
``--version`` and ``version``, ``completion <shell>``, and kubectl's way to find a kubeconfig.

``klutch-gitops`` and ``klutch-bind`` (also ``kubectl klutch-bind``) answer ``--version`` and
``version`` with the same plain line, as ``flux --version`` and ``argocd version --client
--short`` do, and print their completion script to stdout like ``kubectl completion bash``.
"""

from __future__ import annotations

import json
import os
import platform
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import yaml

from klutch_gitops import __version__
from klutch_gitops.errors import KlutchError

if TYPE_CHECKING:  # the kubernetes client loads when a command reads a cluster, not for --help
    from kubernetes.client import ApiClient

    from klutch_gitops.kube.client import Kube

HELP_WIDTH = 80  # click wraps help text to this; option names are never cut (plain help)


class LogLevel(StrEnum):
    """The levels of Python's logging a person may choose; click lists them on a wrong one."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


LogLevelOption = Annotated[
    LogLevel, typer.Option("--log-level", case_sensitive=False, help="How much to log")
]


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


VersionOption = Annotated[
    bool,
    typer.Option(
        "--version", help="Print the version and exit.", is_eager=True, callback=_print_version
    ),
]


class VersionOutput(StrEnum):
    text = "text"
    json = "json"


def version(
    output: Annotated[
        VersionOutput, typer.Option("-o", "--output", help="text: the version; json: also Python")
    ] = VersionOutput.text,
) -> None:
    """Print the version (the same line as --version)."""
    if output is VersionOutput.json:
        data = {"version": __version__, "python": platform.python_version()}
        typer.echo(json.dumps(data, indent=2))
    else:
        typer.echo(__version__)


class Shell(StrEnum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def completion(
    ctx: typer.Context,
    shell: Annotated[Shell, typer.Argument(help="bash, zsh or fish")],
) -> None:
    """Print the shell completion script: source <(PROG completion bash).

    The script calls this program back with _<PROG>_COMPLETE set (click's shell_completion
    protocol, as typer implements it); add the source line to ~/.bashrc (zsh: ~/.zshrc; fish:
    write it to ~/.config/fish/completions/<prog>.fish).
    """
    from typer._click.shell_completion import get_completion_class  # typer vendors click

    root = ctx.find_root()
    prog = root.info_name or "klutch-gitops"
    complete_var = f"_{prog}_COMPLETE".replace("-", "_").upper()  # what typer reads back
    shell_class = get_completion_class(shell.value)
    if shell_class is None:  # completion_init registers all three
        raise KlutchError(f"no completion for {shell.value}", "use bash, zsh or fish")
    typer.echo(shell_class(root.command, {}, prog, complete_var).source())


def add_conventions(app: typer.Typer) -> None:
    """``version`` and ``completion`` on ``app`` (``--version`` goes on its callback).

    Registers typer's bash/zsh/fish completion classes too: typer does so only with its own
    ``--install-completion`` options, which both CLIs leave out for ``completion SHELL``; the
    script's call back (``_PROG_COMPLETE=complete_bash``) needs them.
    """
    from typer._completion_classes import completion_init  # where typer.completion takes it from

    completion_init()
    app.command()(version)
    app.command()(completion)


# -- kubeconfig loading, as kubectl does it --------------------------------------------------

# Every command's one --kubeconfig: which cluster it names, the command's help and --context say.
KubeconfigOption = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, ~/.kube/config)"),
]


def kubeconfig_paths(kubeconfig: Path | None) -> list[Path]:
    """The kubeconfig files kubectl reads, in precedence order.

    k8s.io/client-go/tools/clientcmd/loader.go (``NewDefaultClientConfigLoadingRules``, ``Load``):
    ``--kubeconfig`` alone (it must exist), else every file of ``$KUBECONFIG`` (``:``-separated,
    missing ones skipped), else ``~/.kube/config``.
    """
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise KlutchError(f"no kubeconfig at {kubeconfig}", "fix --kubeconfig")
        return [kubeconfig]
    listed = os.environ.get("KUBECONFIG")
    if listed:
        return [Path(p).expanduser() for p in listed.split(os.pathsep) if p]
    return [Path("~/.kube/config").expanduser()]


def current_context(kubeconfig: Path | None) -> str | None:
    """The current context of the merged kubeconfig, or None without one.

    loader.go: "The first file to set a particular map key wins" for maps, and ``current-context``
    (not in a map) is taken from the first file that sets it too — unlike the kubernetes Python
    client's KubeConfigMerger, where the last one wins; so callers pass this name explicitly.
    """
    for path in kubeconfig_paths(kubeconfig):
        if not path.is_file():
            continue
        name = _read_kubeconfig(path).get("current-context")
        if name:
            return str(name)
    return None


def _read_kubeconfig(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise KlutchError(
            f"cannot read the kubeconfig {path}: {error}",
            "fix the file, or choose another with --kubeconfig or $KUBECONFIG",
        ) from None
    return data if isinstance(data, dict) else {}


def kubeconfig_source(kubeconfig: Path | None) -> str:
    """How a person would name where the kubeconfig came from, for messages."""
    if kubeconfig is not None:
        return f"--kubeconfig {kubeconfig}"
    listed = os.environ.get("KUBECONFIG")
    return f"$KUBECONFIG ({listed})" if listed else "~/.kube/config"


@dataclass(frozen=True)
class ClusterOption:
    """A cluster a command reads: its own kubeconfig file (``option``), else a context of the
    kubeconfig kubectl would read (``kubeconfig_paths``), else the current one; ``plan`` treats
    neither file nor context as offline."""

    file: Path | None
    context: str | None
    option: str

    def __bool__(self) -> bool:
        return self.file is not None or self.context is not None

    def kube(self, kubeconfig: Path | None) -> Kube | None:
        """``connect``, or None when neither a file nor a context is set (``plan``: offline)."""
        return self.connect(kubeconfig) if self else None

    def connect(self, kubeconfig: Path | None) -> Kube:
        """The cluster once it answers, else an error naming the option (the current context
        when none is set)."""
        from klutch_gitops.kube.client import Kube, api_client
        from klutch_gitops.preflight import reach_cluster

        paths = (
            [self.file] if self.file else [p for p in kubeconfig_paths(kubeconfig) if p.is_file()]
        )
        what = self.option if self.file else f"--context {self.context or '(current)'}"
        if not paths:
            raise KlutchError(
                f"{what}: no kubeconfig at {kubeconfig_source(kubeconfig)}",
                "pass --kubeconfig FILE, or set $KUBECONFIG",
            )
        # a file of its own names its current context itself (read by api_client)
        name = self.context or (None if self.file else current_context(kubeconfig))
        if len(paths) == 1:
            reach_cluster(paths[0], what, name)
            return Kube(api_client(paths[0], name))
        return Kube(_merged_client(paths, name, what))


def _merged_client(paths: list[Path], context: str | None, what: str) -> ApiClient:
    """An ApiClient of ``context`` in several kubeconfig files merged (the kubernetes client's
    KubeConfigMerger: the first file to name a cluster, user or context wins), once it answers."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    from klutch_gitops import preflight

    files = os.pathsep.join(str(path) for path in paths)
    source = Path(files)
    try:
        api: client.ApiClient = config.new_client_from_config(config_file=files, context=context)
    except (config.ConfigException, OSError, ValueError) as error:
        raise KlutchError(f"{what}: {error}", f"fix the kubeconfig files {files}") from None
    try:
        client.VersionApi(api).get_code(_request_timeout=preflight.TIMEOUT_SECONDS)
    except HTTPError as error:
        raise preflight.unreachable(error, api.configuration.host, source, what) from None
    except ApiException as error:
        raise preflight.refused(error, api.configuration.host, source, what) from None
    return api
