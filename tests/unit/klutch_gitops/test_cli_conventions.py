"""What kubectl, flux and argocd users expect of both command lines: ``version`` and
``--version`` alike, ``completion <shell>``, plain help that keeps every flag name whole at 80
columns, no secret on argv, and kubectl's kubeconfig loading rules.

Loading rules: k8s.io/client-go/tools/clientcmd/loader.go (``Load``): ``--kubeconfig`` alone,
else every ``$KUBECONFIG`` file (missing ones skipped), else ``~/.kube/config``; "the first file to
set a particular map key wins", and ``current-context`` comes from the first file that sets it.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import yaml
from typer._click import Context
from typer.core import TyperGroup
from typer.testing import CliRunner

from klutch_gitops import __version__
from klutch_gitops.bind.cli import app as bind_app
from klutch_gitops.cli import app as gitops_app
from klutch_gitops.cli_options import ClusterOption, current_context, kubeconfig_paths
from klutch_gitops.errors import KlutchError

APPS = {"klutch-gitops": gitops_app, "klutch-bind": bind_app}
SECRET_WORDS = ("token", "password", "secret")
# Options whose name has a secret word but whose value is a name, not a secret.
NOT_SECRETS = {
    "--secret-namespace": "the namespace of the credentials Secret local-provider writes"
}
BIN = Path(sys.executable).parent


def walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """(path of names, command) for every click command of the tree, groups included (through
    ``list_commands``, which loads a lazy group such as ``dev``)."""
    yield path, command
    if isinstance(command, TyperGroup):
        context = Context(command)
        for name in sorted(command.list_commands(context)):
            yield from walk(command.get_command(context, name), (*path, name))


@functools.cache
def every_command() -> list[tuple[str, tuple[str, ...], Any]]:
    return [
        (program, path, command)
        for program, app in APPS.items()
        for path, command in walk(typer.main.get_command(app))
    ]


@pytest.mark.parametrize("program", APPS)
def test_version_and_dash_dash_version_print_the_same_line(program: str) -> None:
    runner = CliRunner()
    flag = runner.invoke(APPS[program], ["--version"])
    command = runner.invoke(APPS[program], ["version"])
    assert flag.exit_code == command.exit_code == 0, flag.output + command.output
    assert flag.output == command.output == f"{__version__}\n"


@pytest.mark.parametrize("program", APPS)
def test_version_as_json_names_python_too(program: str) -> None:
    result = CliRunner().invoke(APPS[program], ["version", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == {
        "version": __version__,
        "python": platform.python_version(),
    }


@pytest.mark.parametrize("program", APPS)
@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_completion_prints_a_script_for_the_program(program: str, shell: str) -> None:
    result = CliRunner().invoke(APPS[program], ["completion", shell], prog_name=program)
    assert result.exit_code == 0, result.output
    complete_var = f"_{program.replace('-', '_').upper()}_COMPLETE"
    assert f"{complete_var}=complete_{shell}" in result.output


def complete_in_bash(program: str, words: list[str]) -> list[str]:
    """Source ``PROGRAM completion bash`` in a real bash, complete ``words`` (the last one being
    typed) through the script's function, as bash's ``complete -F`` would, and read COMPREPLY."""
    function = f"_{program.replace('-', '_')}_completion"
    script = (
        f"source <({program} completion bash) && COMP_WORDS=({' '.join(words)}) && "
        f"COMP_CWORD={len(words) - 1} && {function} {program} && "
        'printf "%s\\n" "${COMPREPLY[@]}"'
    )
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["klutch-bind", "comp"], ["completion"]),
        (["klutch-bind", "unbind", "--token-"], ["--token-file"]),
        (["klutch-gitops", "pla"], ["plan"]),
        (["klutch-gitops", "plan", "--app-c"], ["--app-context"]),
    ],
)
def test_the_bash_script_completes_commands_and_flags(
    words: list[str], expected: list[str]
) -> None:
    assert (BIN / words[0]).exists(), "the project is installed into the venv (pip install -e .)"
    assert complete_in_bash(words[0], words) == expected


def test_no_option_takes_a_secret_on_the_command_line() -> None:
    """An option named for a token, password or secret takes a file path (or is a flag)."""
    offenders = []
    for program, path, command in every_command():
        for param in command.params:
            names = [*param.opts, *param.secondary_opts]
            secretive = [n for n in names if any(word in n.lower() for word in SECRET_WORDS)]
            if not secretive or getattr(param, "is_flag", False):
                continue
            if param.type_descriptor.annotation is Path or set(names) & set(NOT_SECRETS):
                continue
            offenders.append(f"{program} {' '.join(path)} {'/'.join(names)}")
    assert offenders == []
    assert len(every_command()) > 20  # the walk reached the subcommands


def test_an_old_token_flag_says_what_to_use_instead() -> None:
    for args in (["status", "--token", "abc"], ["exports", "https://b.example", "--token=abc"]):
        result = CliRunner().invoke(bind_app, args)
        assert result.exit_code == 2, result.output
        assert "--token is gone" in result.output
        assert "--token-file" in result.output
        assert "KLUTCH_BIND_TOKEN" in result.output


@pytest.mark.parametrize(
    ("program", "path"),
    [(program, path) for program, path, _ in every_command()],
    ids=lambda value: " ".join(value) if isinstance(value, tuple) else value,
)
def test_help_keeps_every_option_name_whole_at_80_columns(
    program: str, path: tuple[str, ...]
) -> None:
    command = next(c for prog, p, c in every_command() if (prog, p) == (program, path))
    result = CliRunner().invoke(APPS[program], [*path, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    words = set(result.output.replace(",", " ").split())
    for param in command.params:
        if getattr(param, "hidden", False) or not param.opts[0].startswith("-"):
            continue
        for name in [*param.opts, *param.secondary_opts]:
            assert name in words, f"{program} {' '.join(path)}: {name} cut:\n{result.output}"
    assert "╭" not in result.output  # plain help, not rich boxes


def kubeconfig(path: Path, current: str | None, *contexts: str) -> Path:
    data: dict = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [],
        "users": [],
        "contexts": [{"name": c, "context": {"cluster": c, "user": c}} for c in contexts],
    }
    if current:
        data["current-context"] = current
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_first_kubeconfig_file_to_set_current_context_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unlike the kubernetes Python client's KubeConfigMerger (the last one wins there)."""
    empty = kubeconfig(tmp_path / "empty", None, "x")
    first = kubeconfig(tmp_path / "first", "one", "one")
    second = kubeconfig(tmp_path / "second", "two", "two")
    listed = [tmp_path / "missing", empty, first, second]
    monkeypatch.setenv("KUBECONFIG", os.pathsep.join(map(str, listed)))
    assert kubeconfig_paths(None) == listed
    assert current_context(None) == "one"
    assert current_context(second) == "two"  # --kubeconfig: that file alone


def test_the_default_kubeconfig_and_an_explicit_missing_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kubeconfig_paths(None) == [tmp_path / ".kube" / "config"]
    assert current_context(None) is None
    with pytest.raises(KlutchError, match=r"no kubeconfig at .*nope"):
        current_context(tmp_path / "nope")
    (tmp_path / "bad").write_text("{unclosed")
    with pytest.raises(KlutchError, match=r"cannot read the kubeconfig .*bad"):
        current_context(tmp_path / "bad")


def test_plan_takes_contexts_only_with_what_they_go_with(tmp_path: Path) -> None:
    runner = CliRunner()
    alone = runner.invoke(gitops_app, ["plan", "--base", "a", "--head", "b", "--context", "cp"])
    assert alone.exit_code == 2
    assert "(or --context) and --consumer-namespace go together" in alone.output
    config = tmp_path / "c.yaml"
    both = ["plan", "--base", "a", "--head", "b", "-c", str(config), "--app-context", "app"]
    mixed = runner.invoke(gitops_app, both)
    assert mixed.exit_code == 2
    assert "--config names the clusters itself" in mixed.output


def test_a_plan_context_without_any_kubeconfig_names_where_it_looked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "a") + os.pathsep + str(tmp_path / "b"))
    cluster = ClusterOption(None, "cp", "--control-plane-kubeconfig")
    assert not ClusterOption(None, None, "--app-kubeconfig")
    assert ClusterOption(None, None, "--app-kubeconfig").kube(None) is None  # offline
    with pytest.raises(KlutchError, match=r"--context cp: no kubeconfig at \$KUBECONFIG") as raised:
        cluster.kube(None)
    assert "--kubeconfig FILE" in raised.value.fix
