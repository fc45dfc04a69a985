"""Find or build the Go binaries of the local stack.

Each component is a committed wrapper Go module under ``tools/bins/<component>/`` whose go.mod
pins the upstream version. Binaries are built once into a cache outside the clone, keyed by
component and version (``~/.cache/klutch-gitops/bin/<component>-<version>/``), so clones and CI
runs on the same machine share them. ``KLUTCH_BIN_DIR`` and ``KUBEBUILDER_ASSETS`` point at
prebuilt binaries instead.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from klutch_gitops.errors import KlutchError

TOOLS_DIR = Path(__file__).resolve().parents[2] / "tools" / "bins"
MIN_GO = (1, 25)


@dataclass(frozen=True)
class Component:
    """One wrapper module and the binaries built from it."""

    name: str
    module: str  # the upstream module whose required version keys the cache
    binaries: dict[str, str]  # binary name -> Go package
    version_ldflags: tuple[str, ...] = ()  # Go packages whose version variables are stamped
    cgo: bool = False

    @property
    def module_dir(self) -> Path:
        return TOOLS_DIR / self.name

    def version(self) -> str:
        """The version of ``module`` that the wrapper go.mod requires."""
        go_mod = self.module_dir / "go.mod"
        match = re.search(
            rf"^\s*(?:require\s+)?{re.escape(self.module)}\s+(\S+)",
            go_mod.read_text(),
            re.MULTILINE,
        )
        if not match:
            raise KlutchError(
                f"{go_mod}: no 'require {self.module} <version>' line",
                "restore the wrapper go.mod from Git",
            )
        return match.group(1)

    def ldflags(self) -> str:
        version = self.version()
        major, minor = version.lstrip("v").split(".")[:2]
        return " ".join(
            f"-X {pkg}.gitVersion={version} -X {pkg}.gitMajor={major} -X {pkg}.gitMinor={minor}"
            f" -X {pkg}.gitTreeState=clean"
            for pkg in self.version_ldflags
        )


COMPONENTS = (
    Component("etcd", "go.etcd.io/etcd/server/v3", {"etcd": "go.etcd.io/etcd/server/v3"}),
    Component(
        "kubernetes",
        "k8s.io/kubernetes",
        {
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kubectl": "k8s.io/kubernetes/cmd/kubectl",
        },
        version_ldflags=("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"),
    ),
    # Dex 2.41 compiles its SQLite storage only with cgo (gcc), even when it is not used.
    Component("dex", "github.com/dexidp/dex", {"dex": "github.com/dexidp/dex/cmd/dex"}, cgo=True),
)


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "klutch-gitops" / "bin"


def cache_dir(component: Component) -> Path:
    return cache_root() / f"{component.name}-{component.version()}"


def override_dirs() -> list[tuple[str, Path]]:
    """Directories of prebuilt binaries named by the environment, most specific first."""
    return [
        (var, Path(os.environ[var]))
        for var in ("KLUTCH_BIN_DIR", "KUBEBUILDER_ASSETS")
        if os.environ.get(var)
    ]


@dataclass(frozen=True)
class Resolved:
    name: str
    path: Path | None
    source: str  # the variable or cache directory it came from, or "missing"


def resolve_all() -> dict[str, Resolved]:
    """Where each binary is, without building anything."""
    found: dict[str, Resolved] = {}
    for component in COMPONENTS:
        cached = cache_dir(component)
        for binary in component.binaries:
            found[binary] = Resolved(binary, None, "missing")
            for var, directory in [*override_dirs(), ("cache", cached)]:
                if _is_executable(directory / binary):
                    found[binary] = Resolved(binary, directory / binary, var)
                    break
    return found


def require(*names: str) -> dict[str, Path]:
    """Paths of the named binaries, or one error that lists every missing one and the fix."""
    found = resolve_all()
    missing = [n for n in names if found[n].path is None]
    if missing:
        raise KlutchError(
            f"binaries not found: {', '.join(missing)} (looked in $KLUTCH_BIN_DIR, "
            f"$KUBEBUILDER_ASSETS and {cache_root()})",
            "run 'make bins' to build them from the wrapper Go modules, or point KLUTCH_BIN_DIR at "
            "a directory holding prebuilt binaries",
        )
    return {n: found[n].path for n in names}  # type: ignore[misc]


@dataclass(frozen=True)
class BuildReport:
    component: str
    version: str
    binary: str
    source: str
    seconds: float | None  # None when nothing was built


def build_missing(on_start: Callable[[str, str], None] = lambda c, b: None) -> list[BuildReport]:
    """Build every binary that neither an override nor the cache provides.

    A component is built into a temporary directory and renamed into the cache only when all of its
    binaries built, so an interrupted build never leaves a half-filled cache entry. A lock keeps two
    concurrent builds (say, two checkouts' test runs) from racing.
    """
    _check_go()
    reports: list[BuildReport] = []
    cache_root().mkdir(parents=True, exist_ok=True)
    with _lock(cache_root() / ".lock"):
        resolved = resolve_all()  # inside the lock: a concurrent build may just have finished
        for component in COMPONENTS:
            version = component.version()
            wanted = [b for b in component.binaries if resolved[b].path is None]
            reports += [
                BuildReport(component.name, version, b, resolved[b].source, None)
                for b in component.binaries
                if b not in wanted
            ]
            if not wanted:
                continue
            target = cache_dir(component)
            staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_root()))
            try:
                if target.exists():  # keep binaries of this version that are already there
                    shutil.copytree(target, staging, dirs_exist_ok=True)
                for binary in wanted:
                    on_start(component.name, binary)
                    seconds = _go_build(component, binary, staging / binary)
                    reports.append(BuildReport(component.name, version, binary, "built", seconds))
                if target.exists():
                    shutil.rmtree(target)
                staging.rename(target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    return reports


def _go_build(component: Component, binary: str, output: Path) -> float:
    env = {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "1" if component.cgo else "0",
        "GOFLAGS": "-mod=mod",
    }
    argv = [
        "go",
        "build",
        "-trimpath",
        "-ldflags",
        component.ldflags(),
        "-o",
        str(output),
        component.binaries[binary],
    ]
    started = time.monotonic()
    result = subprocess.run(
        argv, cwd=component.module_dir, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise KlutchError(
            f"building {binary} ({component.name} {component.version()}) failed:\n"
            f"{result.stderr[-4000:]}",
            f"check Go and network access to the module proxy, then rerun 'make bins' "
            f"(command: cd {component.module_dir} && {' '.join(argv)})",
        )
    return time.monotonic() - started


def _check_go() -> None:
    go = shutil.which("go")
    if go is None:
        raise KlutchError(
            "the Go toolchain is not on PATH",
            f"install Go {MIN_GO[0]}.{MIN_GO[1]} or newer (https://go.dev/doc/install)",
        )
    out = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    if not match or (int(match[1]), int(match[2])) < MIN_GO:
        raise KlutchError(
            f"Go {out.strip()} is too old to build the local stack",
            f"install Go {MIN_GO[0]}.{MIN_GO[1]} or newer",
        )


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
