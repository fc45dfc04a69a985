"""The two distributions as pyproject.toml files declare them: klutch-gitops (the root; the
laptop's base, the ``server`` extra) and klutch-bind (packaging/klutch-bind: only the commands);
the catalog as package data; the krew manifest.

The base is checked against what the code really imports: every module the bind CLI and the
light klutch-gitops commands reach (import statements read from the source, nested ones too) is
imported in a fresh interpreter, and what lands in ``sys.modules`` must come from the base's
dependency closure, none of it from the server extra's. tests/integration/test_installed.py builds
and installs the real wheels.

The krew checks follow krew's own validation: pkg/index/validation/validate.go (ValidatePlugin,
validatePlatform, validateSelector; sha256 ``^[a-f0-9]{64}$``), internal/installation/semver
(versions start with ``v``) and cmd/validate-krew-manifest/main.go (file named after the plugin,
line lengths, selectors that match a platform, no two platforms for one os/arch) in
kubernetes-sigs/krew.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
import tomllib
from fnmatch import fnmatch
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from setuptools import find_namespace_packages

from klutch_gitops import catalog, server_extra
from klutch_gitops.errors import KlutchError
from tools.release import dist

ROOT = Path(__file__).resolve().parents[3]
ROOT_PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
BIND_PROJECT = tomllib.loads((ROOT / "packaging/klutch-bind/pyproject.toml").read_text())
FIRST_PARTY = dist.FIRST_PARTY
# The contract of issue 18: none of these may reach a laptop.
SERVER_ONLY = {
    "fastapi",
    "uvicorn",
    "psycopg",
    "psycopg-binary",
    "gitpython",
    "watchfiles",
    "jinja2",
    "prometheus-client",
    "python-multipart",
}
# Imported only because they happen to be installed here, and done without on a laptop:
# httpx/__init__.py imports its own CLI (httpx/_main.py, the `cli` extra) when click is there;
# kubernetes/config/kube_config.py tries `import google.auth`, which fails but leaves the `google`
# namespace package (protobuf's, here) in sys.modules.
OPPORTUNISTIC = {"click", "protobuf"}


def names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def base() -> list[str]:
    return ROOT_PROJECT["project"]["dependencies"]


def server() -> list[str]:
    return ROOT_PROJECT["project"]["optional-dependencies"]["server"]


def closure(requirements: list[str]) -> set[str]:
    """The distributions ``requirements`` pull in, through the installed ones' metadata."""
    seen: set[str] = set()
    todo = [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        for extra in requirement.extras or {""}:
            for text in metadata.requires(name) or []:
                nested = Requirement(text)
                if nested.marker is None or nested.marker.evaluate({"extra": extra}):
                    todo.append(nested)
    return seen


# -- one version, one owner per command ------------------------------------------------------


def test_the_two_distributions_share_one_version() -> None:
    version = ROOT_PROJECT["project"]["version"]
    assert BIND_PROJECT["project"]["version"] == version, "packaging/klutch-bind/pyproject.toml"
    assert BIND_PROJECT["project"]["dependencies"] == [f"klutch-gitops=={version}"]
    assert dist.version() == version


def test_each_command_belongs_to_one_distribution() -> None:
    """Two wheels that both install bin/klutch-bind would overwrite each other's file."""
    root_scripts = ROOT_PROJECT["project"]["scripts"]
    bind_scripts = BIND_PROJECT["project"]["scripts"]
    assert set(root_scripts) == {"klutch-gitops"}
    assert set(bind_scripts) == {"klutch-bind", "kubectl-klutch_bind"}
    assert BIND_PROJECT["tool"]["setuptools"]["packages"] == []  # the code is klutch-gitops's
    for target in [*root_scripts.values(), *bind_scripts.values()]:
        module, _, function = target.partition(":")
        assert callable(getattr(__import__(module, fromlist=[function]), function)), target


# -- packages and package data ---------------------------------------------------------------


def test_every_package_is_listed_for_the_wheel() -> None:
    """pyproject.toml lists the packages (the catalog's mapping rules out discovery): a new
    package missing there would be missing from the wheel and only fail once installed."""
    found = set(find_namespace_packages(where=str(ROOT), include=[f"{p}*" for p in FIRST_PARTY]))
    listed = set(ROOT_PROJECT["tool"]["setuptools"]["packages"])
    assert sorted(found - listed) == [], "add these to [tool.setuptools] packages in pyproject.toml"
    assert sorted(listed - found) == ["klutch_gitops._catalog"]
    assert ROOT_PROJECT["tool"]["setuptools"]["package-dir"] == {
        "klutch_gitops._catalog": "catalog"
    }


def test_every_catalog_file_is_package_data() -> None:
    patterns = ROOT_PROJECT["tool"]["setuptools"]["package-data"]["klutch_gitops._catalog"]
    files = [p.relative_to(ROOT / "catalog") for p in (ROOT / "catalog").rglob("*") if p.is_file()]
    dropped = [
        str(f) for f in files if not any(fnmatch(f.name, p.split("/")[-1]) for p in patterns)
    ]
    assert files
    assert dropped == [], f"add their patterns to package-data in pyproject.toml: {dropped}"


def test_the_catalog_is_found_installed_and_in_a_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert catalog.catalog_dir() == ROOT / "catalog"
    installed = tmp_path / "site-packages" / "klutch_gitops"
    (installed / "_catalog" / "xrds").mkdir(parents=True)
    monkeypatch.setattr(catalog, "__file__", str(installed / "catalog.py"))
    assert catalog.catalog_dir() == installed / "_catalog"


def test_a_missing_catalog_folder_is_an_error_not_an_empty_catalog(tmp_path: Path) -> None:
    with pytest.raises(KlutchError, match=r"catalog folder .* is missing") as raised:
        catalog.read_documents(tmp_path / "xrds")
    assert "reinstall klutch-gitops" in raised.value.fix


# -- the base and the server extra -----------------------------------------------------------


def test_the_base_carries_nothing_of_the_server() -> None:
    assert names(base()) & SERVER_ONLY == set()
    assert names(server()) >= SERVER_ONLY
    assert "pydantic" in names(base())
    assert closure(base()) & SERVER_ONLY == set(), "a base dependency pulls in a server package"


def test_every_requirement_has_a_lower_bound_the_lock_satisfies() -> None:
    lock = {
        canonicalize_name(name): version
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if line and not line.startswith("#")
        for name, _, version in [line.partition("==")]
    }
    for text in [*base(), *server()]:
        requirement = Requirement(text)
        assert any(s.operator == ">=" for s in requirement.specifier), f"{text}: no lower bound"
        pinned = lock.get(canonicalize_name(requirement.name))
        assert pinned, f"{requirement.name} is not pinned in requirements.lock"
        assert requirement.specifier.contains(pinned), f"requirements.lock's {pinned} vs {text}"
    missing = closure([*base(), *server()]) - set(lock)
    assert missing == set(), "regenerate requirements.lock (its header says how)"


def test_the_closure_follows_nested_and_relative_imports() -> None:
    modules = dist.reached("klutch_gitops.bind.cli")
    assert {"klutch_gitops.bind.client", "klutch_gitops.kube.client", "klutch_gitops"} <= modules
    assert not any(m.startswith(("reconciler", "bind_api")) for m in modules)
    assert "reconciler.manager" in dist.reached("klutch_gitops.cli")  # `run` imports it lazily


def loaded_distributions(modules: list[str]) -> set[str]:
    """The distributions whose top-level modules a fresh interpreter imports for ``modules``
    (not those its start-up loads, such as setuptools' distutils hook)."""
    script = (
        "import importlib, json, sys\n"
        "before = set(sys.modules)\n"
        "for name in sys.argv[1:]: importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in set(sys.modules) - before})))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, *modules], capture_output=True, text=True, check=True
    )
    owners = metadata.packages_distributions()
    return {
        canonicalize_name(owner)
        for top in json.loads(result.stdout)
        if top not in FIRST_PARTY
        for owner in owners.get(top, [])
    }


def test_the_laptop_commands_import_only_the_base() -> None:
    modules = dist.laptop_modules()
    loaded = loaded_distributions(modules)
    server_only = closure([*base(), *server()]) - closure(base())
    assert {"kubernetes", "typer", "pydantic"} <= loaded  # it saw the imports
    assert loaded & server_only - OPPORTUNISTIC == set(), "import it in the command that needs it"
    assert loaded - closure(base()) - OPPORTUNISTIC == set(), "add it to the base"


# -- commands that need the server extra -----------------------------------------------------


def test_a_server_command_without_the_extra_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    requires = [
        'fastapi>=0.165; extra == "server"',
        "typer>=0.29",
        'no-such-dist>=1; extra == "server"',
    ]
    monkeypatch.setattr(server_extra.metadata, "requires", lambda _: requires)
    assert server_extra.extra_requirements() == ["fastapi", "no-such-dist"]
    with pytest.raises(KlutchError) as raised:
        server_extra.require_server("run")
    assert "klutch-gitops run needs the 'server' extra" in str(raised.value)
    assert "no-such-dist" in str(raised.value)
    assert "fastapi" not in raised.value.message.split("installed:")[1]
    assert "pip install 'klutch-gitops[server]'" in raised.value.fix


def test_a_server_command_with_the_extra_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    requires = ['fastapi>=0.165; extra == "server"', 'pyyaml; extra == "dev"']
    monkeypatch.setattr(server_extra.metadata, "requires", lambda _: requires)
    assert server_extra.extra_requirements() == ["fastapi"]
    server_extra.require_server("bind-api")


# -- krew ------------------------------------------------------------------------------------


def krew_problems(path: Path) -> list[str]:
    """What krew's ValidatePlugin and validate-krew-manifest would refuse or warn about."""
    plugin: dict[str, Any] = yaml.safe_load(path.read_text())
    spec, problems = plugin["spec"], []
    name = path.name.removesuffix(".yaml")
    if plugin.get("apiVersion") != "krew.googlecontainertools.github.com/v1alpha2":
        problems.append("apiVersion")
    if plugin.get("kind") != "Plugin":
        problems.append("kind")
    if not re.fullmatch(r"[\w-]+", name) or plugin["metadata"]["name"] != name:
        problems.append("name: must match the file name and ^[\\w-]+$")
    short = spec.get("shortDescription", "")
    if not short or "\n" in short.strip("\n") or len(short) > 70:
        problems.append("shortDescription: one line of at most 70 characters")
    for field, limit in (("description", 80), ("caveats", 80)):
        long = [line for line in spec.get(field, "").splitlines() if len(line) > limit]
        problems += [f"{field}: line longer than {limit}: {line!r}" for line in long]
    if not re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?", spec["version"]):
        problems.append(f"version {spec['version']!r}: semver with a leading v")
    if not spec.get("platforms"):
        problems.append("platforms: none")
    return problems + [
        p for platform in spec.get("platforms", []) for p in platform_problems(platform)
    ]


def platform_problems(platform: dict[str, Any]) -> list[str]:
    problems = [
        f"{field} has to be set" for field in ("uri", "sha256", "bin") if not platform.get(field)
    ]
    if not re.fullmatch(r"[a-f0-9]{64}", platform.get("sha256", "")):
        problems.append("sha256: ^[a-f0-9]{64}$")
    selector = platform.get("selector") or {}
    keys = [
        *(selector.get("matchLabels") or {}),
        *(e["key"] for e in selector.get("matchExpressions") or []),
    ]
    if not keys or set(keys) - {"os", "arch"}:
        problems.append(f"selector: only os and arch, not empty ({keys})")
    return problems


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector's meaning for the In/NotIn expressions and matchLabels krew uses."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        inside = labels.get(expression["key"]) in expression["values"]
        if inside != (expression["operator"] == "In"):
            return False
    return True


@pytest.fixture
def rendered(tmp_path: Path) -> tuple[Path, Path]:
    """The archive (with stand-in wheels) and the manifest dist.py writes for it."""
    wheels = [
        tmp_path / "klutch_bind-1-py3-none-any.whl",
        tmp_path / "klutch_gitops-1-py3-none-any.whl",
    ]
    for wheel in wheels:
        wheel.write_bytes(b"not really a wheel")
    archive = dist.krew_archive(wheels, tmp_path)
    return archive, dist.krew_manifest(archive, tmp_path)


def test_the_krew_manifest_passes_krews_validation(rendered: tuple[Path, Path]) -> None:
    archive, manifest = rendered
    assert krew_problems(manifest) == []
    plugin = yaml.safe_load(manifest.read_text())
    [platform] = plugin["spec"]["platforms"]
    assert platform["sha256"] == dist.sha256(archive)
    assert platform["uri"].endswith(f"/v{dist.version()}/{archive.name}")
    assert plugin["spec"]["version"] == f"v{dist.version()}"
    offered = [
        (os, arch)
        for os in ("linux", "darwin", "windows")
        for arch in ("amd64", "arm64")
        if matches(platform["selector"], {"os": os, "arch": arch})
    ]
    assert offered == [
        ("linux", "amd64"),
        ("linux", "arm64"),
        ("darwin", "amd64"),
        ("darwin", "arm64"),
    ]


def test_the_validation_refuses_what_krew_refuses(
    tmp_path: Path, rendered: tuple[Path, Path]
) -> None:
    plugin = yaml.safe_load(rendered[1].read_text())
    plugin["spec"]["version"] = "0.1.0"
    plugin["spec"]["platforms"][0]["sha256"] = "${SHA256}"
    plugin["spec"]["platforms"][0]["selector"] = {"matchLabels": {"distro": "debian"}}
    wrong = tmp_path / "other-name.yaml"
    wrong.write_text(yaml.safe_dump(plugin))
    problems = " ".join(krew_problems(wrong))
    for expected in ("name:", "version", "sha256", "selector"):
        assert expected in problems


def test_the_krew_archive_holds_the_launcher_and_is_reproducible(
    rendered: tuple[Path, Path],
) -> None:
    archive, _ = rendered
    first = dist.sha256(archive)
    with tarfile.open(archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
        launcher = tar.extractfile("klutch-bind").read().decode()  # type: ignore[union-attr]
    assert sorted(members) == [
        "constraints.txt",
        "klutch-bind",
        "wheels/klutch_bind-1-py3-none-any.whl",
        "wheels/klutch_gitops-1-py3-none-any.whl",
    ]
    assert members["klutch-bind"].mode == 0o755
    assert {m.mtime for m in members.values()} == {0}
    assert f"version='{dist.version()}'" in launcher
    assert "@VERSION@" not in launcher
    dist.krew_archive(sorted(archive.parent.glob("*.whl")), archive.parent)
    assert dist.sha256(archive) == first
    subprocess.run(["sh", "-n", str(dist.KREW / "klutch-bind.sh")], check=True)
