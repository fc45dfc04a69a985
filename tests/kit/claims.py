"""Claims as a person writes them, status as a provider writes it, and the claims that Git and
a cluster hold, by name."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.kube.client import Kube, KubeError, Resource
from klutch_gitops.kube.crds import load_dev_claim_crds

from .git import git

CLAIM_CRDS = load_dev_claim_crds()
POSTGRES = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")


def claim(name: str, namespace: str, plan: str = "postgresql-single-nano", extra: str = "") -> str:
    """A PostgresqlInstance file with comments (write-back keeps them); ``extra`` is appended."""
    return f"""# {name}: a database for the team
apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: {name}   # keep this name
  namespace: {namespace}
spec:
  service: a9s-postgresql13
  plan: {plan}
  writeConnectionSecretToRef:
    name: {name}-conn
{extra}"""


def ready_status(generation: int | None = 1, host: str = "db.example") -> dict:
    """A provider's Ready status; ``generation=None`` leaves ``observedGeneration`` out."""
    status: dict[str, Any] = {
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Available",
                "lastTransitionTime": "2026-11-21T10:00:00Z",
            }
        ],
        "host": host,
    }
    if generation is not None:
        status["observedGeneration"] = generation
    return status


def write_status(kube: Kube, name: str, namespace: str, status: dict) -> None:
    """What a provider does: write ``status`` into a claim (status subresource, its own field
    manager)."""
    kube.apply(
        POSTGRES,
        {
            "apiVersion": POSTGRES.api_version,
            "kind": POSTGRES.kind,
            "metadata": {"name": name, "namespace": namespace},
            "status": status,
        },
        field_manager="provider",
        force=True,
        subresource="status",
    )


def is_ready(status: Mapping[str, Any] | None) -> bool:
    """Whether a claim's status (in Git or a cluster) says Ready=True."""
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (status or {}).get("conditions") or []
    )


def git_claims(remote: Path, path: str = "claims", ref: str = "main") -> dict[str, dict]:
    """The PostgresqlInstances on ``ref`` under ``path`` (``.klutch/`` skipped), by name."""
    claims = {}
    for file in git(remote, "ls-tree", "-r", "--name-only", ref, "--", path).split():
        if "/.klutch/" in f"/{file}" or not file.endswith((".yaml", ".yml")):
            continue
        for doc in yaml.safe_load_all(git(remote, "show", f"{ref}:{file}")):
            if isinstance(doc, dict) and doc.get("kind") == POSTGRES.kind:
                claims[doc["metadata"]["name"]] = doc
    return claims


def live_claims(kube: Kube, namespace: str) -> dict[str, dict]:
    """The PostgresqlInstances in ``namespace`` by name; AssertionError (retry) while the kind
    is not served there yet."""
    try:
        items, _ = kube.list(POSTGRES, namespace)
    except KubeError as error:
        if error.not_found:
            raise AssertionError(f"{POSTGRES.plural} not served in {namespace} yet") from None
        raise
    return {obj["metadata"]["name"]: obj for obj in items}
