"""What a bind request carries, checked before anything is created: the permission claims the
person accepts, the repository and its Git credentials, and the App kubeconfig minified for the
reconciler."""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import normalize_repo_url, redact

GIT_PASSWORD_ENV = "KLUTCH_GIT_PASSWORD"  # noqa: S105 - the variable's name, not a password
CREDENTIALS_FIX = (
    f"pass the user with --git-username and the password or token through ${GIT_PASSWORD_ENV} "
    "or --git-password-file, never on the command line"
)


def confirmation_needed(yes: bool, interactive: bool) -> bool:
    """Whether to ask; without a terminal to ask on, ``--yes`` is required."""
    if yes:
        return False
    if not interactive:
        raise KlutchError(
            "binding grants permission claims and needs confirmation, but there is no terminal",
            "pass --yes to accept the listed permission claims",
        )
    return True


def claims_for(offered: list[dict[str, Any]], apis: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The permission claims of each requested API; unknown or refused APIs are errors."""
    by_api = {item["api"]: item for item in offered}
    unknown = [api for api in apis if api not in by_api]
    if unknown:
        raise KlutchError(
            f"not offered: {', '.join(unknown)}; offered: {', '.join(sorted(by_api)) or 'none'}",
            "run 'klutch-bind exports <url>' and pick from the list",
        )
    refused = [
        f"{api}: {by_api[api].get('reason', '')}" for api in apis if not by_api[api]["allowed"]
    ]
    if refused:
        raise KlutchError(
            f"not allowed to bind {'; '.join(refused)}",
            "ask the platform team for membership in an allowed group",
        )
    return {api: list(by_api[api].get("permissionClaims") or []) for api in apis}


def repository_body(
    repo: str | None,
    branch: str,
    path: str,
    namespaces: list[str] | None,
    credentials: dict[str, str],
) -> dict[str, Any] | None:
    """The ``repository`` of a bind request, or None; refused before anything is created."""
    if repo is None:
        return None
    if not namespaces:
        raise KlutchError(
            "--repo needs the App namespaces whose claims the repository holds",
            "pass --namespace NS (repeatable)",
        )
    if redact(repo) != repo:
        raise KlutchError(f"--repo {redact(repo)} carries credentials in the URL", CREDENTIALS_FIX)
    normalize_repo_url(repo)  # a URL naming no repository is refused with the forms to use
    return {
        "url": repo,
        "branch": branch,
        "path": path,
        "appNamespaces": namespaces,
        **credentials,
    }


def git_credentials(
    username: str | None,
    password_file: Path | None,
    ssh_key: Path | None,
    known_hosts: Path | None,
) -> dict[str, str]:
    """The request's credential fields; the password comes from a file, stdin or the
    environment ($KLUTCH_GIT_PASSWORD), so it never appears in a command line or shell history."""
    password = os.environ.get(GIT_PASSWORD_ENV) or None
    if password_file is not None:
        password = read_text(password_file, "--git-password-file").rstrip("\r\n")
    values = {
        "username": username,
        "password": password,
        "sshPrivateKey": read_text(ssh_key, "--ssh-private-key") if ssh_key else None,
        "knownHosts": read_text(known_hosts, "--known-hosts") if known_hosts else None,
    }
    return {key: value for key, value in values.items() if value}


def app_kubeconfig(kubeconfig: Path | None, context: str | None) -> str:
    """The App kubeconfig for the bind API's reconciler: one context, credentials inlined."""
    if kubeconfig is None:
        raise KlutchError(
            "a repository binding needs the App Cluster kubeconfig for the reconciler",
            "pass --kubeconfig with --repo",
        )
    text = read_text(kubeconfig, "--kubeconfig")
    return minified_kubeconfig(text, context, kubeconfig.parent, str(kubeconfig))


_INLINED = {
    "cluster": (("certificate-authority", "certificate-authority-data"),),
    "user": (("client-certificate", "client-certificate-data"), ("client-key", "client-key-data")),
}


def minified_kubeconfig(text: str, context: str | None, base: Path, origin: str) -> str:
    """Only ``context`` (default: the current one), its cluster and user, with every file the
    reconciler could not read inlined, like ``kubectl config view --minify --flatten``.

    The other contexts' credentials never leave the machine; an exec or auth-provider user cannot
    work in the reconciler and is refused with what to use instead.
    """
    try:
        config = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise KlutchError(f"{origin} is not YAML: {error}", "check --kubeconfig") from None
    config = config if isinstance(config, dict) else {}
    name = context or config.get("current-context")
    named = {
        kind: {e.get("name"): dict(e.get(kind) or {}) for e in config.get(f"{kind}s") or []}
        for kind in ("context", "cluster", "user")
    }
    if name not in named["context"]:
        raise KlutchError(
            f"{origin} has no context {name!r}",
            f"pass --context with one of: {', '.join(map(str, named['context'])) or 'none'}",
        )
    entry = named["context"][name]
    picked: dict[str, dict[str, Any]] = {}
    for kind in ("cluster", "user"):
        ref = entry.get(kind)
        if ref not in named[kind]:
            raise KlutchError(
                f"{origin}: context {name!r} names {kind} {ref!r}, which it does not define",
                "check --kubeconfig and --context",
            )
        picked[kind] = _inline(named[kind][ref], _INLINED[kind], base)
    user = picked["user"]
    if "exec" in user or "auth-provider" in user:
        raise KlutchError(
            f"{origin}: user {entry['user']!r} of context {name!r} logs in through a plugin, "
            "which the reconciler cannot run",
            "pass a kubeconfig whose user has a token or a client certificate for the App Cluster",
        )
    if "tokenFile" in user:
        user["token"] = read_text(base / user.pop("tokenFile"), "the user's tokenFile").strip()
    minified = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": entry["cluster"], "cluster": picked["cluster"]}],
        "users": [{"name": entry["user"], "user": user}],
        "contexts": [{"name": name, "context": entry}],
        "current-context": name,
    }
    return yaml.safe_dump(minified, sort_keys=False)


def _inline(
    section: dict[str, Any], fields: tuple[tuple[str, str], ...], base: Path
) -> dict[str, Any]:
    """``section`` with each file field replaced by its base64 ``-data`` field."""
    for file_field, data_field in fields:
        if file_field in section:
            path = base / section.pop(file_field)  # relative to the kubeconfig, as kubectl does
            try:
                content = path.read_bytes()
            except OSError as error:
                raise KlutchError(
                    f"cannot read {path} ({file_field} in the kubeconfig): {error.strerror}",
                    "check the kubeconfig's file references",
                ) from None
            section[data_field] = base64.b64encode(content).decode()
    return section


def read_text(path: Path, what: str) -> str:
    """A file's text (``-`` reads stdin), or a KlutchError naming the option."""
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text()
    except OSError as error:
        raise KlutchError(
            f"cannot read {what} {path}: {error.strerror or error}", f"check {what}"
        ) from None
