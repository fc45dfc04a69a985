"""Build what a release publishes: the wheels and sdists of both distributions, and the krew
plugin archive and manifest of ``kubectl klutch-bind``.

- ``klutch-gitops`` (the repository root): the code, the catalog as package data, the
  ``klutch-gitops`` command; the ``server`` extra adds what the reconciler and the bind API run.
- ``klutch-bind`` (``packaging/klutch-bind``): the ``klutch-bind`` and ``kubectl-klutch_bind``
  commands, depending on ``klutch-gitops`` of the same version without extras.
- ``klutch-bind-VERSION.tar.gz`` and ``klutch-bind.yaml`` (``packaging/krew``): one archive for
  every platform krew offers it on, with a launcher that installs the two wheels into a venv.

``python -m tools.release.dist --out dist`` (``make dist``). Needs a source checkout and the
``build`` frontend (the ``dev`` extra); ``python -m build`` fetches the build backend itself.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

from klutch_gitops.errors import KlutchError

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = (ROOT, ROOT / "packaging" / "klutch-bind")
KREW = ROOT / "packaging" / "krew"
LOCK = ROOT / "requirements.lock"
# The archive's entries carry this time, not the build's: the same inputs give the same bytes.
ARCHIVE_MTIME = 0


FIRST_PARTY = ("klutch_gitops", "klutch_local", "reconciler", "bind_api")
# What the laptop commands (klutch-bind, the light klutch-gitops ones) import: the whole source
# closure of these, and these others at module level only (their server commands import lazily).
# Everything they reach must import with the base dependencies alone.
LAPTOP_CLOSURES = ("klutch_gitops.bind.cli", "klutch_gitops.inspect.commands")
LAPTOP_MODULES = ("klutch_gitops.cli",)


def version(project: Path = ROOT) -> str:
    """The version in a project's pyproject.toml."""
    path = project / "pyproject.toml"
    if not path.is_file():  # an installed copy carries the code, not the projects
        raise KlutchError(f"{path} is missing", "build from a source checkout of klutch-gitops")
    return tomllib.loads(path.read_text())["project"]["version"]


def build(out: Path) -> list[Path]:
    """Wheel and sdist of every distribution into ``out``, replacing older ones of the same
    name (the wheel is built from the sdist, as ``python -m build`` does, so a file missing from
    the sdist fails here)."""
    versions = {str(project.relative_to(ROOT)): version(project) for project in PROJECTS}
    if len(set(versions.values())) != 1:
        raise KlutchError(
            f"the distributions' versions differ: {versions}",
            "give packaging/klutch-bind/pyproject.toml the root's version and its pin",
        )
    out.mkdir(parents=True, exist_ok=True)
    built: list[Path] = []
    for project in PROJECTS:
        with tempfile.TemporaryDirectory(prefix="klutch-dist-") as staging:
            result = subprocess.run(
                [sys.executable, "-m", "build", "--outdir", staging, str(project)],
                capture_output=True,
                text=True,
                check=False,
                env={**os.environ, **source_date_epoch()},
            )
            if result.returncode != 0:
                raise KlutchError(
                    f"python -m build {project} failed:\n{(result.stdout + result.stderr)[-3000:]}",
                    "install the dev extra (it has `build`) and fix what the build reports",
                )
            for path in sorted(Path(staging).iterdir()):
                built.append(Path(shutil.move(path, out / path.name)))
    return built


def source_date_epoch() -> dict[str, str]:
    """SOURCE_DATE_EPOCH as the last commit's time, unless set: wheels of the same tree get the
    same bytes (their entries' times come from it), so do the archives that carry them. Outside
    a Git checkout, nothing (the files' own times; zip cannot store the epoch's 1970)."""
    if "SOURCE_DATE_EPOCH" in os.environ:
        return {}
    result = subprocess.run(
        ["git", "-C", str(ROOT), "log", "-1", "--format=%ct"],
        capture_output=True,
        text=True,
        check=False,
    )
    stamp = result.stdout.strip() if result.returncode == 0 else ""
    return {"SOURCE_DATE_EPOCH": stamp} if stamp else {}


def launcher(release: str) -> bytes:
    """The krew archive's executable: packaging/krew/klutch-bind.sh for this version."""
    return (KREW / "klutch-bind.sh").read_text().replace("@VERSION@", release).encode()


def krew_archive(wheels: list[Path], out: Path) -> Path:
    """``klutch-bind-VERSION.tar.gz``: launcher, ``wheels/``, ``constraints.txt``; byte for byte
    the same for the same inputs (sorted entries, fixed times and owners, gzip without a time)."""
    release = version()
    entries: list[tuple[str, bytes, int]] = [
        ("klutch-bind", launcher(release), 0o755),
        ("constraints.txt", LOCK.read_bytes(), 0o644),
        *((f"wheels/{wheel.name}", wheel.read_bytes(), 0o644) for wheel in sorted(wheels)),
    ]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, mode in sorted(entries):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, ARCHIVE_MTIME
            tar.addfile(info, io.BytesIO(data))
    archive = out / f"klutch-bind-{release}.tar.gz"
    with archive.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as packed:
        packed.write(buffer.getvalue())
    return archive


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def krew_manifest(archive: Path, out: Path) -> Path:
    """``out/klutch-bind.yaml``: the template with this version and the archive's sha256; its
    leading comments, about the template, give way to one line naming the archive."""
    lines = (KREW / "klutch-bind.yaml").read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
    body = "".join(lines[first:])
    rendered = body.replace("${VERSION}", version()).replace("${SHA256}", sha256(archive))
    manifest = out / "klutch-bind.yaml"
    manifest.write_text(f"# From packaging/krew/klutch-bind.yaml for {archive.name}\n{rendered}")
    return manifest


def release(out: Path) -> list[Path]:
    """Everything a release uploads: wheels, sdists, the krew archive and its manifest."""
    built = build(out)
    wheels = [path for path in built if path.suffix == ".whl"]
    archive = krew_archive(wheels, out)
    return [*built, archive, krew_manifest(archive, out)]


def imports_of(module: str) -> set[str]:
    """Every first-party module ``module`` imports, at any depth of its code, except under
    ``if TYPE_CHECKING:``; ``from a import b`` names both ``a`` and ``a.b``."""
    path = module_path(module)
    if path is None:
        raise KlutchError(
            f"no source file for the module {module}", "name a module of the checkout"
        )
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for statement in node.body
        for inner in ast.walk(statement)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            origin = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*parent, *([node.module] if node.module else [])])
            found |= {origin} | {f"{origin}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] in FIRST_PARTY}


def module_path(module: str) -> Path | None:
    """The module's source file in the checkout; None for a name that is no module (``from
    package import function`` names ``package.function`` too)."""
    base_path = ROOT.joinpath(*module.split("."))
    for path in (base_path.with_suffix(".py"), base_path / "__init__.py"):
        if path.is_file():
            return path
    return None


def reached(start: str) -> set[str]:
    """``start`` and every first-party module it imports, directly or not, with their packages."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen or module_path(module) is None:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        todo += imports_of(module)
    return seen


def laptop_modules() -> list[str]:
    """Every first-party module the laptop commands can import, sorted."""
    reachable = {module for start in LAPTOP_CLOSURES for module in reached(start)}
    return sorted(reachable | set(LAPTOP_MODULES))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tools.release.dist",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where to write (dist/)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    try:
        files = release(args.out)
    except KlutchError as error:
        sys.exit(f"error: {error}")
    for path in files:
        print(path)
    print(f"built in {time.monotonic() - started:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main()
