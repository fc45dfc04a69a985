"""Remembered logins of ``klutch-bind``, per kubectl context: after ``klutch-bind login URL
--issuer … --client-id …`` the other commands need neither the URL nor the issuer.

Modelled on ``argocd login`` (argoproj/argo-cd ``cmd/argocd/commands/login.go``), which upserts a
server and a context into ``util/localconfig/localconfig.go``'s LocalConfig and keeps that file
owner-only (``util/localconfig/file_perm_unix.go``). Two differences: the key is the kubectl
context (the App Cluster a binding is for), so ``kubectl config use-context`` switches the bind
API too; and no token is ever written here: tokens stay in ``token_cache`` (0600, per issuer and
client), so this file may be shown and shared.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.cli_options import current_context
from klutch_gitops.errors import KlutchError

NO_CONTEXT = ""  # the key when no kubeconfig names a current context
HEADER = (
    "# klutch-bind: the bind API each kubectl context logs in to (written by 'klutch-bind login',\n"
    "# removed by 'klutch-bind logout'). No tokens: those are in $XDG_CONFIG_HOME/klutch-gitops.\n"
)
KEYS = {"context": "context", "url": "server", "issuer": "issuer", "client_id": "clientId"}
KEYS |= {"ca": "issuerCa", "api_ca": "apiCa"}


@dataclass(frozen=True)
class Login:
    """What ``login`` remembers for one kubectl context; ``ca`` is the issuer's CA bundle,
    ``api_ca`` the bind API's (both file paths, as given)."""

    context: str
    url: str
    issuer: str
    client_id: str
    ca: str | None = None
    api_ca: str | None = None


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "klutch-bind" / "config.yaml"


def kubectl_context(kubeconfig: Path | None, context: str | None) -> str:
    """``--context``, else the kubeconfig's current context (kubectl's rules), else none."""
    return context or current_context(kubeconfig) or NO_CONTEXT


def describe(context: str) -> str:
    return f"kubectl context {context}" if context else "no kubectl context (no kubeconfig)"


def load() -> list[Login]:
    """Every remembered login; a file that is not ours is an error naming it."""
    path = config_path()
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except FileNotFoundError:
        return []
    except (OSError, yaml.YAMLError) as error:
        raise KlutchError(f"cannot read {path}: {error}", f"fix or delete {path}") from None
    entries = data.get("contexts") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise KlutchError(
            f"{path}: 'contexts' is not a list of logins",
            f"delete {path} and run 'klutch-bind login' again",
        )
    return [_login(entry, path) for entry in entries]


def _login(entry: dict[str, Any], path: Path) -> Login:
    known = {v: k for k, v in KEYS.items()}
    unknown = sorted(set(entry) - set(known))
    missing = [
        KEYS[f.name] for f in fields(Login) if f.default is not None and KEYS[f.name] not in entry
    ]
    if unknown or missing:
        problem = f"unknown keys {unknown}" if unknown else f"missing {missing}"
        raise KlutchError(
            f"{path}: a login has {problem}", f"delete {path} and run 'klutch-bind login' again"
        )
    values: dict[str, Any] = {known[k]: (None if v is None else str(v)) for k, v in entry.items()}
    return Login(**values)


def find(context: str) -> Login | None:
    return next((login for login in load() if login.context == context), None)


def remember(login: Login) -> Path:
    """Add or replace the login of ``login.context``."""
    others = [kept for kept in load() if kept.context != login.context]
    return _save([*others, login])


def forget(context: str) -> Login | None:
    """Remove the login of ``context``; returns it, or None when there was none."""
    logins = load()
    gone = next((login for login in logins if login.context == context), None)
    if gone is not None:
        _save([login for login in logins if login is not gone])
    return gone


def as_data(logins: list[Login]) -> dict[str, Any]:
    """The file's shape: ``contexts``, each with the keys of KEYS, unset ones left out."""
    return {
        "contexts": [
            {KEYS[k]: v for k, v in asdict(login).items() if v is not None}
            for login in sorted(logins, key=lambda item: item.context)
        ]
    }


def _save(logins: list[Login]) -> Path:
    """Write atomically and owner-only (0600 from creation), in an owner-only directory."""
    path = config_path()
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temp = path.parent / f".{path.name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as error:
        raise KlutchError(
            f"cannot write {path}: {error.strerror or error}",
            "set XDG_CONFIG_HOME to a writable directory, or make that path writable",
        ) from None
    try:
        with os.fdopen(fd, "w") as file:
            file.write(HEADER + yaml.safe_dump(as_data(logins), sort_keys=False))
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return path
