"""Settings: reading a service's config file and resolving the secrets it references.

A config file is read field by field, every problem collected and reported at once, each naming
the field path and the fix, so one edit fixes them all. Shared by the reconciler's config
(``config_file``), repository registrations (``repository_config``) and the bind API's config.

Secrets are read as references only (``SecretRef``): a file, an environment variable, or a key of a
Secret on the Control Plane. Every program resolves them here, so a missing file, an unset
variable or a wrong key is reported alike: the field, what is wrong, and the fix.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from klutch_gitops.config import GitCredentialsRef, SecretRef
from klutch_gitops.errors import KlutchError, yaml_problem
from klutch_gitops.kube.client import SECRETS, Kube

NAME_PATTERN = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DURATION_PATTERN = re.compile(r"^(\d+(\.\d+)?)(ms|s|m|h)$")


class FieldReader:
    """Walks a parsed document, collecting every problem as ``path: message (fix)``."""

    def __init__(self, origin: str, base: Path) -> None:
        self.origin = origin
        self.base = base
        self.problems: list[str] = []

    def problem(self, where: str, message: str, fix: str) -> None:
        self.problems.append(f"{where}: {message} — {fix}")

    def parse(self, text: str) -> Any:
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise KlutchError(
                f"{self.origin}: not valid YAML: {yaml_problem(error)}", "fix the YAML syntax"
            ) from None

    def check(self) -> None:
        """Raise one KlutchError listing every problem found, if any."""
        if self.problems:
            raise KlutchError(
                f"{self.origin}: {len(self.problems)} problem(s):\n  " + "\n  ".join(self.problems),
                "edit the config file and run again",
            )

    def own_kubeconfig(self, data: Any, who: str) -> Path | None:
        """A service's own identity: ``controlPlane.kubeconfig``, a file (never a Secret)."""
        ref = self.kubeconfig(data, "controlPlane")
        if ref is not None and ref.file is None:
            self.problem(
                "controlPlane",
                f"{who}'s own identity must be a kubeconfig file",
                "set controlPlane.kubeconfig",
            )
        return ref.file if ref is not None else None

    def mapping(self, data: Any, where: str, known: set[str]) -> Mapping[str, Any]:
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            self.problem(
                where,
                f"must be a mapping, got {type(data).__name__}",
                "write it as `key: value` lines",
            )
            return {}
        for key in data:
            if key not in known:
                self.problem(
                    f"{where}.{key}" if where else str(key),
                    "unknown field",
                    f"remove it; known fields here: {', '.join(sorted(known))}",
                )
        return data

    def string(
        self,
        data: Mapping[str, Any],
        key: str,
        where: str,
        *,
        required: bool = False,
        default: str | None = None,
        pattern: re.Pattern[str] | None = None,
        fix: str = "",
    ) -> str | None:
        value = data.get(key, default)
        path = f"{where}.{key}" if where else key
        if value is None:
            if required:
                self.problem(path, "is required", fix or f"set {key}")
            return None
        if not isinstance(value, str) or not value:
            self.problem(path, f"must be a non-empty string, got {value!r}", fix or f"set {key}")
            return None
        if pattern and not pattern.match(value):
            self.problem(path, f"{value!r} is not valid", fix)
            return None
        return value

    def duration(self, data: Mapping[str, Any], key: str, where: str) -> float | None:
        value = self.string(
            data,
            key,
            where,
            pattern=DURATION_PATTERN,
            fix="write a duration like 500ms, 30s, 5m or 1h",
        )
        if value is None:
            return None
        match = DURATION_PATTERN.match(value)
        assert match
        return float(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[3]]

    def path(self, value: str) -> Path:
        path = Path(value).expanduser()
        return path if path.is_absolute() else self.base / path

    def secret_ref(
        self, data: Any, where: str, *, key_default: str | None = None
    ) -> SecretRef | None:
        if data is None:
            return None
        data = self.mapping(data, where, {"file", "env", "secretRef"})
        chosen = [k for k in ("file", "env", "secretRef") if k in data]
        if len(chosen) != 1:
            self.problem(
                where,
                "needs exactly one of file, env, secretRef",
                "name a file, an environment variable, or a Secret on the Control Plane",
            )
            return None
        if "file" in data:
            value = self.string(data, "file", where)
            return SecretRef(file=self.path(value)) if value else None
        if "env" in data:
            value = self.string(data, "env", where)
            return SecretRef(env=value) if value else None
        ref_where = f"{where}.secretRef"
        ref = self.mapping(data["secretRef"], ref_where, {"namespace", "name", "key"})
        return SecretRef(
            namespace=self.string(ref, "namespace", ref_where),
            name=self.string(
                ref, "name", ref_where, required=True, fix="name the Secret on the Control Plane"
            ),
            key=self.string(
                ref,
                "key",
                ref_where,
                default=key_default,
                required=True,
                fix="name the key inside the Secret",
            ),
        )

    def kubeconfig(self, data: Any, where: str) -> SecretRef | None:
        """``{kubeconfig: FILE}`` or ``{kubeconfigSecretRef: {namespace, name, key}}``."""
        data = self.mapping(data, where, {"kubeconfig", "kubeconfigSecretRef"})
        if "kubeconfig" in data:
            value = self.string(data, "kubeconfig", where)
            return SecretRef(file=self.path(value)) if value else None
        if "kubeconfigSecretRef" in data:
            return self.secret_ref(
                {"secretRef": data["kubeconfigSecretRef"]},
                f"{where}.kubeconfigSecretRef",
                key_default="kubeconfig",
            )
        self.problem(
            where,
            "needs kubeconfig or kubeconfigSecretRef",
            "name a kubeconfig file or a Secret holding one",
        )
        return None

    def credentials(self, data: Any, where: str) -> GitCredentialsRef | None:
        if data is None:
            return None
        data = self.mapping(
            data, where, {"secretRef", "username", "password", "sshKeyFile", "knownHostsFile"}
        )
        secret = None
        if "secretRef" in data:
            ref = self.mapping(data["secretRef"], f"{where}.secretRef", {"namespace", "name"})
            secret = SecretRef(
                namespace=self.string(ref, "namespace", f"{where}.secretRef"),
                name=self.string(ref, "name", f"{where}.secretRef", required=True),
            )
        ssh_key = self.string(data, "sshKeyFile", where)
        known_hosts = self.string(data, "knownHostsFile", where)
        return GitCredentialsRef(
            secret=secret,
            username=self.string(data, "username", where),
            password=self.secret_ref(data.get("password"), f"{where}.password"),
            ssh_key_file=self.path(ssh_key) if ssh_key else None,
            known_hosts_file=self.path(known_hosts) if known_hosts else None,
        )


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
