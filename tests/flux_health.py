"""Flux's healthCheckExprs evaluated as kustomize-controller evaluates them: by cel-go with
Flux's CEL environment and order (``tests/fluxcel``, built once into the cache by ``go build``)."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).resolve().parent / "fluxcel"
CACHE = Path.home() / ".cache" / "klutch-gitops" / "test-bin"


@cache
def evaluator() -> Path:
    """The fluxcel binary for the current source (Go from the PATH; modules from the proxy)."""
    digest = hashlib.sha256(
        b"".join((SOURCE / name).read_bytes() for name in ("main.go", "go.mod", "go.sum"))
    ).hexdigest()[:16]
    binary = CACHE / f"fluxcel-{digest}" / "fluxcel"
    if not binary.exists():  # built aside and renamed: test workers may build it at once
        CACHE.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".fluxcel-", dir=CACHE))
        try:
            subprocess.run(
                ["go", "build", "-o", str(staging / "fluxcel"), "."],
                cwd=SOURCE,
                check=True,
                capture_output=True,
            )
            staging.rename(binary.parent)
        except OSError:
            if not binary.exists():  # not the other builder's win
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return binary


def flux_health(obj: Mapping[str, Any], expressions: Mapping[str, str]) -> str:
    """Current, InProgress or Failed; Unknown when an expression cannot be evaluated (Flux
    then keeps waiting, as for InProgress)."""
    result = subprocess.run(
        [str(evaluator())],
        input=json.dumps({"expressions": dict(expressions), "object": dict(obj)}),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 3:
        return "Unknown"
    if result.returncode != 0:
        raise RuntimeError(f"fluxcel failed: {result.stderr.strip()}")
    return result.stdout.strip()
