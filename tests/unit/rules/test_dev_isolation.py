"""The local kit stays out of the product (issue 28).

The product's commands, and every Pod, import ``klutch_gitops.cli``: it must load no module of the
local stack (``klutch_gitops.dev``), the local backend (``klutch_local``), the release tooling
(``tools``) or the tests; ``klutch-gitops dev`` loads the stack when one of its commands runs. The
wheels, built here as a release builds them, hold the first-party packages and nothing of the test
kit or the release tooling.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from klutch_gitops.cli import app
from tools.release import dist
from tools.release.image.rootfs import run
from tools.release.image.wheels import project_wheel

ROOT = Path(__file__).resolve().parents[3]
# Not for a Pod or a laptop: the local stack, the local backend, the release tooling, the tests.
KIT_MODULES = ("klutch_gitops.dev", "klutch_local", "tools", "tests", "bench")
# Path segments of the test kit and the release tooling, wherever a wheel might carry them.
KIT_SEGMENTS = {"tests", "kit", "testkit", "peers", "bench", "tools", "release", "image", "dist.py"}


def loaded_kit(args: list[str] | None) -> list[str]:
    """The kit modules a fresh interpreter holds after ``import klutch_gitops.cli`` and, unless
    ``args`` is None, after running ``klutch-gitops ARGS``."""
    script = (
        "import json, sys\n"
        "import klutch_gitops.cli\n"
        "args = json.loads(sys.argv[1])\n"
        "if args is not None:\n"
        "    from typer.testing import CliRunner\n"
        "    CliRunner().invoke(klutch_gitops.cli.app, args)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, json.dumps(args)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,  # the checkout's code first, as for the tests themselves
    )
    return [
        module
        for module in json.loads(result.stdout)
        if any(module == kit or module.startswith(f"{kit}.") for kit in KIT_MODULES)
    ]


@pytest.mark.parametrize("args", [None, ["version"], ["--help"], ["dev", "--help"]])
def test_the_cli_loads_no_kit_module(args: list[str] | None) -> None:
    loaded = loaded_kit(args)
    if args == ["dev", "--help"]:  # the dev group's commands: the stack's CLI, nothing beyond
        assert "klutch_gitops.dev.cli" in loaded
        assert [m for m in loaded if not m.startswith("klutch_gitops.dev")] == []
    else:
        assert loaded == [], "import it inside the command that needs it"


def test_the_dev_commands_are_there_when_asked_for() -> None:
    result = CliRunner().invoke(app, ["dev", "--help"])
    assert result.exit_code == 0, result.output
    for command in ("bins", "up", "run", "down", "status"):
        assert f"  {command} " in result.output
    assert "  image " not in result.output  # release tooling: python -m tools.release.image
    listed = CliRunner().invoke(app, ["--help"]).output
    assert "The embedded local stack" in listed


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """The file lists of both wheels, built with ``pip wheel`` from a copy of the checkout."""
    out = tmp_path_factory.mktemp("wheels")
    scratch = tmp_path_factory.mktemp("build")
    gitops = project_wheel(out, scratch)
    bind_project = scratch / "source" / "packaging" / "klutch-bind"
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"]
    run([*command, "--no-deps", "--wheel-dir", str(out), str(bind_project)], "the bind wheel")
    [bind] = out.glob("klutch_bind-*.whl")
    lists = {}
    for wheel in (gitops, bind):
        with zipfile.ZipFile(wheel) as archive:
            lists[wheel.name.split("-")[0]] = archive.namelist()
    return lists


def test_the_wheels_hold_no_test_kit_and_no_release_tooling(
    wheels: dict[str, list[str]],
) -> None:
    for wheel, names in wheels.items():
        kit = [name for name in names if KIT_SEGMENTS & set(name.split("/"))]
        assert kit == [], f"{wheel}: drop these packages from [tool.setuptools] packages"
    tops = {name.split("/")[0] for name in wheels["klutch_gitops"]}
    assert {top for top in tops if not top.endswith(".dist-info")} == set(dist.FIRST_PARTY)
    assert all(name.startswith("klutch_bind-") for name in wheels["klutch_bind"])
