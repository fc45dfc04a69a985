"""The registrations a reconciler works on, as its ``GET /registrations`` shows them: the config
file's too, which have no RepositoryBinding to read. The answer names tenants, so it needs the
reconciler's metricsToken (``reconciler/server.py``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx

from klutch_gitops.errors import KlutchError

TOKEN_ENV = "KLUTCH_GITOPS_METRICS_TOKEN"  # noqa: S105 - the variable's name, not a token
KIND = "Registration"  # what -o yaml|json|name calls them: they are not RepositoryBindings


def token(token_file: Path | None) -> str:
    """The metricsToken from ``--token-file`` or ``$KLUTCH_GITOPS_METRICS_TOKEN``."""
    if token_file is not None:
        try:
            found = token_file.read_text().strip()
        except OSError as error:
            raise KlutchError(
                f"--token-file {token_file}: {error.strerror or error}",
                "pass a file holding the reconciler's metricsToken",
            ) from None
    else:
        found = os.environ.get(TOKEN_ENV, "").strip()
    if not found:
        raise KlutchError(
            "the reconciler's /registrations needs its metricsToken",
            f"pass --token-file FILE or set ${TOKEN_ENV}",
        )
    return found


def fetch(url: str, bearer: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every registration, shaped like a RepositoryBinding (metadata, spec, status) so that the
    same columns show it."""
    where = f"{url.rstrip('/')}/registrations"
    try:
        answer = httpx.get(where, headers={"Authorization": f"Bearer {bearer}"}, timeout=timeout)
    except httpx.HTTPError as error:
        raise KlutchError(
            f"cannot reach the reconciler at {where}: {error}",
            "pass the URL of its listen address (the Service's port 8080 in the chart)",
        ) from None
    if answer.status_code == 401:
        raise KlutchError(
            f"{where} refused the token", "pass the reconciler's metricsToken with --token-file"
        )
    if not answer.is_success:
        raise KlutchError(f"{where} answered {answer.status_code}", "check the reconciler's logs")
    try:
        shown = answer.json()["registrations"]
    except (ValueError, KeyError, TypeError):
        raise KlutchError(
            f"{where} did not answer with registrations", "pass the reconciler's URL"
        ) from None
    return [as_object(entry) for entry in shown]


def as_object(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "gitops.klutch.anynines.com/v1alpha1",
        "kind": KIND,
        "metadata": {"name": entry["name"]},
        "spec": entry.get("spec") or {},
        "status": entry.get("status") or {},
    }
