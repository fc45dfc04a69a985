"""The released artifacts as a user installs them (issue 18's Done-when): ``python -m build``
wheels and sdists of both distributions, installed into clean virtual environments (``python -m
venv``, no system site-packages) with their dependencies pinned by requirements.lock, run from
outside the checkout so nothing is imported from the source tree.

- a laptop: ``klutch-bind`` and the base ``klutch-gitops``; ``klutch-bind --version`` works and
  none of the server's packages is there;
- a server: ``klutch-gitops[server]``; ``klutch-gitops version`` and ``klutch-gitops run --once``
  against the local stack reconcile a tenant's claims into both clusters;
- krew: the real krew (sigs.k8s.io/krew, built from its module like the other tools) installs
  the plugin from the manifest and archive dist.py writes (``krew install --manifest --archive``,
  internal/installation/install.go: the archive's sha256 is checked, ``bin`` linked as
  ``kubectl-klutch_bind``), and the launcher's first run installs and starts klutch-bind.

pip's cache makes the second run's installs fast; the build and each install print their times.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from tests.kit.claims import POSTGRES, claim
from tests.kit.tenant import Tenant, make_tenant
from tools.release import dist

ROOT = Path(__file__).resolve().parents[2]
VERSION = dist.version()
SERVER_ONLY = ("fastapi", "uvicorn", "psycopg", "gitpython", "watchfiles", "jinja2")
# The newest krew release is v0.4.5, but the Go module proxy answers 403 ("This module version is
# not available") for it; v0.4.4 installs the same manifests (apiVersion v1alpha2).
KREW_VERSION = "v0.4.4"


@dataclass(frozen=True)
class Release:
    out: Path
    files: list[Path]

    def one(self, pattern: str) -> Path:
        [path] = [p for p in self.files if p.match(pattern)]
        return path


@dataclass(frozen=True)
class Venv:
    path: Path
    home: Path  # cwd of every command: outside the checkout

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment a user's shell gives: this venv first on PATH, nothing of ours."""
        keep = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        path = [p for p in keep.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))]
        return {**keep, "PATH": os.pathsep.join([str(self.path / "bin"), *path]), **(extra or {})}

    def run(
        self, *args: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [*args], cwd=self.home, env=self.env(), capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result

    def pip_install(self, *requirements: str) -> float:
        started = time.monotonic()
        self.run(
            str(self.path / "bin" / "python"), "-m", "pip", "install", "--quiet",
            "--disable-pip-version-check", "-c", str(ROOT / "requirements.lock"), *requirements,
        )  # fmt: skip
        return time.monotonic() - started

    def distributions(self) -> set[str]:
        listed = self.run(
            str(self.path / "bin" / "python"), "-m", "pip", "list", "--format", "json"
        )
        return {entry["name"].lower() for entry in json.loads(listed.stdout)}


def new_venv(where: Path) -> Venv:
    home = where / "home"
    home.mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "venv", str(where / "venv")], check=True)
    return Venv(where / "venv", home)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    out = tmp_path_factory.mktemp("dist")
    started = time.monotonic()
    files = dist.release(out)
    print(f"\nbuilt {len(files)} files in {time.monotonic() - started:.1f} s")
    return Release(out, files)


@pytest.fixture(scope="module")
def laptop(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    venv = new_venv(tmp_path_factory.mktemp("laptop"))
    took = venv.pip_install(
        str(release.one("klutch_bind-*.whl")), str(release.one("klutch_gitops-*.whl"))
    )
    print(f"\nklutch-bind installed in {took:.1f} s")
    return venv


# -- what the artifacts hold -----------------------------------------------------------------


def wheel_metadata(wheel: Path) -> tuple[list[str], Any]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [meta] = [n for n in names if n.endswith(".dist-info/METADATA")]
        return names, Parser().parsestr(archive.read(meta).decode())


def test_the_wheels_carry_the_catalog_and_nothing_of_the_checkout(release: Release) -> None:
    names, meta = wheel_metadata(release.one("klutch_gitops-*.whl"))
    assert "klutch_gitops/_catalog/crds/gitops.klutch.anynines.com_repositorybindings.yaml" in names
    assert any(n.startswith("klutch_gitops/_catalog/compositions/a8s/") for n in names)
    assert "bind_api/templates/base.html" in names
    assert {n.split("/")[0] for n in names} == {
        "klutch_gitops", "klutch_local", "reconciler", "bind_api",
        f"klutch_gitops-{VERSION}.dist-info",
    }  # fmt: skip
    requires = meta.get_all("Requires-Dist")
    base = [r for r in requires if "extra ==" not in r]
    assert not [r for r in base if r.lower().startswith(SERVER_ONLY)], base
    assert any(r.startswith("pydantic") for r in base)
    server = [r for r in requires if 'extra == "server"' in r]
    assert all(any(r.lower().startswith(name) for r in server) for name in SERVER_ONLY)
    with zipfile.ZipFile(release.one("klutch_gitops-*.whl")) as archive:
        entry_points = archive.read(f"klutch_gitops-{VERSION}.dist-info/entry_points.txt").decode()
    assert "klutch-gitops =" in entry_points
    assert "klutch-bind" not in entry_points

    names, meta = wheel_metadata(release.one("klutch_bind-*.whl"))
    assert {n.split("/")[0] for n in names} == {f"klutch_bind-{VERSION}.dist-info"}
    assert meta.get_all("Requires-Dist") == [f"klutch-gitops=={VERSION}"]


def test_the_sdists_build_the_same_wheels(release: Release) -> None:
    """The wheels above were built from these sdists (python -m build's default), so the sdist
    holds the catalog; it holds nothing that is not the distribution's."""
    with tarfile.open(release.one("klutch_gitops-*.tar.gz")) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    assert any(n.startswith("catalog/xrds/") for n in names)
    assert "pyproject.toml" in names
    outside = ("tests/", "tools/", ".venv/", "dist/", "bench/", ".git/")
    assert not [n for n in names if n.startswith(outside)]
    with tarfile.open(release.one("klutch_bind-*.tar.gz")) as sdist:
        names = [n.split("/", 1)[1] for n in sdist.getnames() if "/" in n]
    assert {"pyproject.toml", "README.md"} <= set(names)


# -- a laptop --------------------------------------------------------------------------------


def test_klutch_bind_installs_without_the_server(laptop: Venv) -> None:
    assert VERSION in laptop.run("klutch-bind", "--version").stdout
    assert VERSION in laptop.run("kubectl-klutch_bind", "--version").stdout
    assert VERSION in laptop.run("klutch-gitops", "version").stdout  # the light commands work too
    installed = laptop.distributions()
    assert {"klutch-bind", "klutch-gitops", "kubernetes", "pydantic"} <= installed
    assert [name for name in SERVER_ONLY if name in installed] == []
    where = laptop.run("python", "-c", "import klutch_gitops; print(klutch_gitops.__file__)")
    assert where.stdout.startswith(str(laptop.path)), where.stdout
    # Every module the laptop commands reach, their lazy imports included, imports here.
    script = "import importlib, sys\nfor name in sys.argv[1:]: importlib.import_module(name)\n"
    laptop.run("python", "-c", script, *dist.laptop_modules())


def test_every_catalog_reader_finds_its_files_installed(laptop: Venv) -> None:
    """The modules that read catalog files at run time start from catalog.CATALOG_DIR, which is
    the wheel's package data here; a path built from ``__file__`` would point outside the venv's
    site-packages."""
    script = (
        "from klutch_gitops import binder_roles, catalog, policies\n"
        "from klutch_gitops.kube import crds\n"
        "paths = catalog.XRD_DIR, policies.POLICY_DIR, binder_roles.ROLE_FILE, crds.CRD_DIR\n"
        "for path in paths: print(path.exists(), path)\n"
    )
    lines = laptop.run("python", "-c", script).stdout.splitlines()
    assert len(lines) == 4
    assert [line for line in lines if not line.startswith(f"True {laptop.path}")] == []


def test_a_server_command_on_a_laptop_names_the_extra(laptop: Venv) -> None:
    (laptop.home / "config.yaml").write_text("repositories: []\n")
    result = laptop.run("klutch-gitops", "run", "--once", "--config", "config.yaml", check=False)
    assert result.returncode != 0
    assert "pip install 'klutch-gitops[server]'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


# -- a server --------------------------------------------------------------------------------


def config_file(tenant: Tenant, path: Path, work_dir: Path) -> Path:
    """The tenant's registration as the config file ``klutch-gitops run`` reads."""
    spec = tenant.config.repositories[0]
    repository = {
        "name": spec.name,
        "url": spec.url,
        "path": spec.path,
        "consumerNamespace": spec.consumer_namespace,
        "appNamespaces": list(spec.app_namespaces),
        "appCluster": {"kubeconfig": str(spec.app_kubeconfig.file)},
        "controlPlane": {"kubeconfig": str(spec.control_plane_kubeconfig.file)},
    }
    config = {
        "controlPlane": {"kubeconfig": str(tenant.config.control_plane_kubeconfig)},
        "listen": f"127.0.0.1:{free_port()}",
        "workDir": str(work_dir),
        "repositories": [repository],
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def claim_names(kube: Kube, namespace: str) -> list[str]:
    items, _ = kube.list(POSTGRES, namespace)
    return sorted(item["metadata"]["name"] for item in items)


def test_the_server_extra_runs_the_reconciler_once(
    release: Release,
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    tmp_path: Path,
) -> None:
    server = new_venv(tmp_path / "server")
    wheel = release.one("klutch_gitops-*.whl")
    print(f"\nklutch-gitops[server] installed in {server.pip_install(f'{wheel}[server]'):.1f} s")
    assert server.run("klutch-gitops", "version").stdout.strip().endswith(VERSION)
    where = server.run(
        "python", "-c", "from klutch_gitops import catalog; print(catalog.CATALOG_DIR, "
        "len(catalog.load_catalog()))",
    )  # fmt: skip
    folder, count = where.stdout.split()
    assert folder.startswith(str(server.path)), where.stdout
    assert int(count) > 0

    tenant = make_tenant(stack, clusters, tmp_path, start=False)
    tenant.push({f"claims/{n}.yaml": claim(n, tenant.namespace) for n in ("orders", "users")})
    config = config_file(tenant, server.home / "config.yaml", tmp_path / "work")
    started = time.monotonic()
    server.run("klutch-gitops", "run", "--once", "--config", str(config.name), timeout=180)
    print(f"run --once took {time.monotonic() - started:.1f} s")
    assert claim_names(tenant.app, tenant.namespace) == ["orders", "users"]
    assert claim_names(tenant.control_plane, tenant.mapped) == ["orders", "users"]


# -- krew ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def krew() -> Path:
    """The krew binary, built once from its module into the tools' cache (go install keeps its
    build cache too, so this is quick after the first time)."""
    bin_dir = Path.home() / ".cache" / "klutch-gitops" / f"krew-{KREW_VERSION}"
    binary = bin_dir / "krew"
    if not binary.exists():
        started = time.monotonic()
        subprocess.run(
            ["go", "install", f"sigs.k8s.io/krew/cmd/krew@{KREW_VERSION}"],
            env={**os.environ, "GOBIN": str(bin_dir), "CGO_ENABLED": "0"},
            check=True,
            capture_output=True,
        )
        print(f"\nkrew {KREW_VERSION} built in {time.monotonic() - started:.1f} s")
    return binary


def test_krew_installs_the_plugin_and_its_first_run_installs_klutch_bind(
    release: Release, krew: Path, tmp_path: Path
) -> None:
    user = Venv(tmp_path / "none", tmp_path)  # no venv: the launcher makes its own
    env = user.env({"KREW_ROOT": str(tmp_path / "krew"), "XDG_DATA_HOME": str(tmp_path / "data")})
    manifest, archive = release.one("klutch-bind.yaml"), release.one("klutch-bind-*.tar.gz")
    installed = subprocess.run(
        [str(krew), "install", f"--manifest={manifest}", f"--archive={archive}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr
    plugin = tmp_path / "krew" / "bin" / "kubectl-klutch_bind"
    assert plugin.is_symlink()

    started = time.monotonic()
    first = subprocess.run(
        [str(plugin), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    print(f"\nthe plugin's first run (install) took {time.monotonic() - started:.1f} s")
    assert first.returncode == 0, first.stderr
    assert VERSION in first.stdout
    assert "first run" in first.stderr
    again = subprocess.run(
        [str(plugin), "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (again.returncode, again.stderr) == (0, "")
    assert (tmp_path / "data" / "klutch-bind" / VERSION / ".complete").exists()
