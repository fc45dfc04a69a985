"""Settings: reading a service's config file and resolving the secrets it references.

The files are validated by the models in ``klutch_gitops.models`` (every problem at once, each
with its field path and fix); this module reads them and resolves what they reference.

Secrets are read as references only (``SecretRef``): a file, an environment variable, or a key of a
Secret on the Control Plane. Every program resolves them here, so a missing file, an unset
variable or a wrong key is reported alike: the field, what is wrong, and the fix.
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from klutch_gitops.config import SecretRef
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import SECRETS


def read_config_file(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise KlutchError(
            f"cannot read config {path}: {error.strerror}", "pass an existing file with --config"
        ) from None
    except UnicodeDecodeError:
        raise KlutchError(
            f"config {path} is not UTF-8 text", "pass the YAML config file with --config"
        ) from None


def secret_value(
    ref: SecretRef,
    where: str,
    *,
    program: str,
    control_plane: Kube | None = None,
    namespace: str = "",
) -> bytes:
    """The bytes ``ref`` names; ``where`` names the field in errors, ``program`` the one to restart.

    A Secret reference needs ``control_plane`` (the bind API's own secrets are never Secrets); its
    namespace defaults to ``namespace``.
    """
    if ref.file is not None:
        return _file(ref.file, where)
    if ref.env is not None:
        return _env(ref.env, where, program)
    if ref.name is None or ref.key is None:
        raise KlutchError(
            f"{where}: the reference names no file, environment variable or Secret key",
            "use {file: PATH}, {env: NAME} or {secretRef: {name: NAME, key: KEY}}",
        )
    if control_plane is None:
        raise KlutchError(
            f"{where}: {program} does not read Secrets, so Secret {ref.name} cannot be used",
            "use {file: PATH} or {env: NAME}",
        )
    data = secret_data(control_plane, ref.namespace or namespace, ref.name, where)
    if ref.key not in data:
        raise KlutchError(
            f"{where}: Secret {ref.namespace or namespace}/{ref.name} has no key {ref.key!r} "
            f"(keys: {', '.join(sorted(data)) or 'none'})",
            "fix the key in the reference",
        )
    return data[ref.key]


def secret_data(control_plane: Kube, namespace: str, name: str, where: str) -> dict[str, bytes]:
    """Every key of a Secret on the Control Plane, decoded; an error naming it when it is absent."""
    secret = control_plane.get(SECRETS, namespace, name)
    if secret is None:
        raise KlutchError(
            f"{where}: Secret {namespace}/{name} not found on the Control Plane",
            "create the Secret or fix the reference",
        )
    try:
        return {
            k: base64.b64decode(v, validate=True) for k, v in (secret.get("data") or {}).items()
        }
    except (binascii.Error, TypeError):
        raise KlutchError(
            f"{where}: Secret {namespace}/{name} holds data that is not base64",
            "recreate the Secret with kubectl create secret (or stringData)",
        ) from None


def _file(path: Path, where: str) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise KlutchError(
            f"{where}: cannot read {path}: {error.strerror}",
            "point the reference at a readable file",
        ) from None


def _env(name: str, where: str, program: str) -> bytes:
    if name not in os.environ:
        raise KlutchError(
            f"{where}: environment variable {name} is not set",
            f"export {name} before starting {program}",
        )
    return os.environ[name].encode()
