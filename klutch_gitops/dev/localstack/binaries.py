"""Find or build the Go binaries of the local stack.

Each component is a committed wrapper Go module under ``tools/bins/<component>/`` whose go.mod
pins the upstream version. Binaries are built once into a cache outside the clone, keyed by
component and version (``~/.cache/klutch-gitops/bin/<component>-<version>/``), so clones and CI
runs on the same machine share them. ``KLUTCH_BIN_DIR`` and ``KUBEBUILDER_ASSETS`` point at
prebuilt binaries instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from klutch_gitops.dev.localstack.components import COMPONENTS, TOOLS_DIR, Component
from klutch_gitops.errors import KlutchError

PREFETCHERS = 3  # components whose modules download at once


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
    """Where each binary and asset directory is, without building anything."""
    found: dict[str, Resolved] = {}
    for component in COMPONENTS:
        cached = cache_dir(component)
        for name in [*component.binaries, *component.assets, *component.trees]:
            present = _is_executable if name in component.binaries else Path.is_dir
            found[name] = Resolved(name, None, "missing")
            for var, directory in [*override_dirs(), ("cache", cached)]:
                if present(directory / name):
                    found[name] = Resolved(name, directory / name, var)
                    break
    return found


def require(*names: str) -> dict[str, Path]:
    """Paths of the named binaries and assets, or one error naming every missing one and the fix."""
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


@dataclass(frozen=True)
class Step:
    """A step of ``build_missing`` starting (``seconds`` None) or done, for progress output."""

    component: str
    version: str
    name: str  # a binary, an asset, or MODULES: the download of the component's modules
    seconds: float | None = None


MODULES = "modules"
BUILDERS = 2  # components built at once: one links (one core) while the other compiles


def build_missing(
    on_step: Callable[[Step], None] = lambda _: None, builders: int = BUILDERS
) -> list[BuildReport]:
    """Build every binary that neither an override nor the cache provides.

    A component is built into a temporary directory and renamed into the cache only when all of its
    binaries built, so an interrupted build never leaves a half-filled cache entry. A lock keeps two
    concurrent builds (say, two checkouts' test runs) from racing. The modules of every component
    to build are downloaded in the background while the first ones compile: a cold build spends
    much of its time waiting on the module proxy. ``builders`` components build at once, each
    after its download.
    """
    _check_go()
    reports: list[BuildReport] = []
    cache_root().mkdir(parents=True, exist_ok=True)
    with _lock(cache_root() / ".lock"):
        resolved = resolve_all()  # inside the lock: a concurrent build may just have finished
        todo: list[tuple[Component, list[str]]] = []
        for component in COMPONENTS:
            names = [*component.binaries, *component.assets, *component.trees]
            wanted = [n for n in names if resolved[n].path is None]
            reports += [
                BuildReport(component.name, component.version(), n, resolved[n].source, None)
                for n in names
                if n not in wanted
            ]
            if wanted:
                todo.append((component, wanted))
        with (
            ThreadPoolExecutor(PREFETCHERS, thread_name_prefix="go-mod-download") as downloads,
            ThreadPoolExecutor(builders, thread_name_prefix="go-build") as pool,
        ):
            fetched = [
                downloads.submit(_step, component, MODULES, on_step, partial(_prefetch, component))
                for component, _ in todo
            ]
            built = [
                pool.submit(_build_after, download, component, wanted, on_step)
                for (component, wanted), download in zip(todo, fetched, strict=True)
            ]
            pending: list[Future[Any]] = [*built, *fetched]
            try:
                for build in built:
                    reports += build.result()
            finally:
                for future in pending:
                    future.cancel()  # after a failure, start nothing further
    return reports


def _step(
    component: Component, name: str, on_step: Callable[[Step], None], work: Callable[[], None]
) -> float:
    """Run ``work``, telling ``on_step`` when it starts and ends; its seconds."""
    on_step(Step(component.name, component.version(), name))
    started = time.monotonic()
    work()
    seconds = time.monotonic() - started
    on_step(Step(component.name, component.version(), name, seconds))
    return seconds


def _build_after(
    download: Future[float],
    component: Component,
    wanted: list[str],
    on_step: Callable[[Step], None],
) -> list[BuildReport]:
    download.result()
    return _build(component, wanted, on_step)


def _build(
    component: Component, wanted: list[str], on_step: Callable[[Step], None]
) -> list[BuildReport]:
    """Build ``wanted`` of one component into its cache directory, all or nothing."""
    reports = []
    target = cache_dir(component)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=cache_root()))
    try:
        if target.exists():  # keep what of this version is already there
            shutil.copytree(target, staging, dirs_exist_ok=True)
        for name in wanted:
            output = staging / name
            if name in component.binaries:
                work = partial(_go_build, component, name, output)
            elif name in component.assets:
                work = partial(_copy_asset, component, component.assets[name], output)
            else:
                work = partial(_copy_trees, component, component.trees[name], output)
            seconds = _step(component, name, on_step, work)
            reports.append(BuildReport(component.name, component.version(), name, "built", seconds))
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return reports


def _prefetch(component: Component) -> None:
    """Download the modules the component's binaries import (``go list -deps`` fetches exactly
    those, where ``go mod download`` would also fetch test-only modules the proxy may refuse)."""
    argv = [
        "go",
        "list",
        "-deps",
        "-f",
        "{{.ImportPath}}",
        *(["-tags", ",".join(component.tags)] if component.tags else []),
        *component.binaries.values(),
    ]
    _run_go(component, f"{component.name} modules", argv)


def _go_env(component: Component) -> dict[str, str]:
    return {
        **os.environ,
        "GOTOOLCHAIN": "local",
        "CGO_ENABLED": "1" if component.cgo else "0",
        "GOFLAGS": "-mod=mod",
    }


def _go_build(component: Component, binary: str, output: Path) -> None:
    argv = [
        "go",
        "build",
        "-trimpath",
        "-ldflags",
        component.ldflags(),
        *(["-tags", ",".join(component.tags)] if component.tags else []),
        "-o",
        str(output),
        component.binaries[binary],
    ]
    _run_go(component, binary, argv)


def _module_dir(component: Component, name: str) -> Path:
    """Where the Go module cache holds ``component.module`` (read-only)."""
    argv = ["go", "mod", "download", "-json", component.module]
    return Path(json.loads(_run_go(component, name, argv))["Dir"])


def _copy_asset(component: Component, source: str, output: Path) -> None:
    """Copy ``source``'s YAML files out of the module cache (read-only there, so files only)."""
    module = _module_dir(component, output.name)
    files = sorted((module / source).glob("*.yaml"))
    if not files:
        raise KlutchError(
            f"{component.module}@{component.version()} has no YAML files in {source}/",
            f"check the asset path for {output.name} in klutch_gitops/dev/localstack/binaries.py",
        )
    output.mkdir()
    for file in files:
        shutil.copyfile(file, output / file.name)


def _copy_trees(component: Component, sources: tuple[str, ...], output: Path) -> None:
    """Copy the directories ``sources`` of the module, whole, into ``output`` (files only, so
    the copies are writable, unlike the module cache)."""
    module = _module_dir(component, output.name)
    for source in sources:
        files = [path for path in sorted((module / source).rglob("*")) if path.is_file()]
        if not files:
            raise KlutchError(
                f"{component.module}@{component.version()} has no files in {source}/",
                f"check the trees of {output.name} in klutch_gitops/dev/localstack/binaries.py",
            )
        for file in files:
            target = output / file.relative_to(module)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(file, target)


def _run_go(component: Component, name: str, argv: list[str]) -> str:
    """Run a go command in the wrapper module; its stdout, or an error with the command."""
    result = subprocess.run(
        argv,
        cwd=component.module_dir,
        env=_go_env(component),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise KlutchError(
            f"building {name} ({component.name} {component.version()}) failed:\n"
            f"{result.stderr[-4000:]}",
            f"check Go and network access to the module proxy, then rerun 'make bins' "
            f"(command: cd {component.module_dir} && {' '.join(argv)})",
        )
    return result.stdout


def go_version(text: str) -> tuple[int, ...] | None:
    """``1.26.7`` (a go directive) or ``go1.26.7`` (``go env GOVERSION``) as a comparable tuple."""
    match = re.match(r"(?:go)?(\d+)\.(\d+)(?:\.(\d+))?", text.strip())
    return tuple(int(part or 0) for part in match.groups()) if match else None


def required_go() -> tuple[int, ...]:
    """The newest ``go`` directive of the wrapper modules: with GOTOOLCHAIN=local, the minimum."""
    directives = [
        re.search(r"^go\s+(\S+)", (c.module_dir / "go.mod").read_text(), re.MULTILINE)
        for c in COMPONENTS
    ]
    return max(go_version(d[1]) or (0,) for d in directives if d)


def _check_go() -> None:
    wanted = ".".join(map(str, required_go()))
    go = shutil.which("go")
    if go is None:
        raise KlutchError(
            "the Go toolchain is not on PATH",
            f"install Go {wanted} or newer (https://go.dev/doc/install)",
        )
    out = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()
    found = go_version(out)
    if found is None or found < required_go():
        raise KlutchError(
            f"Go {out} is too old to build the local stack (the wrapper modules in {TOOLS_DIR} "
            f"need {wanted})",
            f"install Go {wanted} or newer",
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
