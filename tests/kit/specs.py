"""Registration specs for unit tests, made the way the reconciler makes them: a config-file entry
validated by the one registration schema and built by its one builder, so every default comes from
the pydantic models (klutch_gitops/models/registration.py), never from a test."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from klutch_gitops.config import RegistrationSpec
from klutch_gitops.config_file import build_config
from klutch_gitops.models.reconciler import ReconcilerConfig


def registration_spec(
    name: str = "team",
    url: str = "https://git.example.com/t.git",
    consumer_namespace: str = "c",
    app_namespaces: tuple[str, ...] = ("t",),
    **fields: Any,
) -> RegistrationSpec:
    """A config entry's spec with the models' defaults; ``fields`` (runtime values) replace
    theirs. Both kubeconfigs are files (``/dev/null``): nothing here reads them."""
    entry = {
        "name": name,
        "url": url,
        "consumerNamespace": consumer_namespace,
        "appNamespaces": list(app_namespaces),
        "appCluster": {"kubeconfig": "/dev/null"},
        "controlPlane": {"kubeconfig": "/dev/null"},
    }
    data = {"controlPlane": {"kubeconfig": "/dev/null"}, "repositories": [entry]}
    [spec] = build_config(ReconcilerConfig.model_validate(data), Path("/")).repositories
    return replace(spec, **fields)
