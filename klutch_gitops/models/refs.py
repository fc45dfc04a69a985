"""References to secrets and kubeconfigs: a file, an environment variable, or a key of a Secret on
the Control Plane. The configs hold these, never a secret's value."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import Field, model_validator

from klutch_gitops.config import GitCredentialsRef, SecretRef
from klutch_gitops.models.types import EnvName, Name, Strict, Text, matching, problem

SECRET_NAME = Annotated[
    str,
    matching(
        r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
        "name a Secret: lowercase letters, digits, '-' and '.'",
        max_length=253,
    ),
]
SECRET_KEY = Annotated[
    str,
    matching(r"^[-._a-zA-Z0-9]+$", "name a key of the Secret: letters, digits, '-', '_' and '.'"),
]
ONE_OF_FIX = "name a file, an environment variable, or a Secret on the Control Plane"


def resolve(base: Path, value: str) -> Path:
    """A path as written in a config file: ``~`` expanded, relative to the file's folder."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


class SecretKeyRef(Strict):
    """A key of a Secret on the Control Plane."""

    namespace: Name | None = Field(
        None, description="Namespace of the Secret; where a default applies, it is named."
    )
    name: SECRET_NAME = Field(description="Name of the Secret.")
    key: SECRET_KEY = Field(description="Key inside the Secret.")

    def ref(self) -> SecretRef:
        return SecretRef(namespace=self.namespace, name=self.name, key=self.key)


class KubeconfigSecretRef(SecretKeyRef):
    """A Secret on the Control Plane holding a kubeconfig."""

    key: SECRET_KEY = Field("kubeconfig", description="Key of the kubeconfig in the Secret.")


class SecretSource(Strict):
    """Exactly one of: a file, an environment variable, or a key of a Secret on the Control
    Plane."""

    model_config = Strict.model_config | {
        "json_schema_extra": {"oneOf": [{"required": [k]} for k in ("file", "env", "secretRef")]}
    }

    file: Text | None = Field(None, description="A file holding the value, relative to the config.")
    env: EnvName | None = Field(None, description="An environment variable holding the value.")
    secret_ref: SecretKeyRef | None = Field(
        None, description="A key of a Secret on the Control Plane."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretSource:
        if sum(v is not None for v in (self.file, self.env, self.secret_ref)) != 1:
            raise problem("needs exactly one of file, env, secretRef", ONE_OF_FIX)
        return self

    def ref(self, base: Path) -> SecretRef:
        if self.file is not None:
            return SecretRef(file=resolve(base, self.file))
        if self.env is not None:
            return SecretRef(env=self.env)
        assert self.secret_ref is not None
        return self.secret_ref.ref()


class OwnSecret(Strict):
    """A secret of the service itself: exactly one of a file or an environment variable."""

    model_config = Strict.model_config | {
        "json_schema_extra": {"oneOf": [{"required": ["file"]}, {"required": ["env"]}]}
    }

    file: Text | None = Field(None, description="A file holding the value, relative to the config.")
    env: EnvName | None = Field(None, description="An environment variable holding the value.")

    @model_validator(mode="after")
    def _exactly_one(self) -> OwnSecret:
        if (self.file is None) == (self.env is None):
            raise problem("needs exactly one of file, env", "use {file: PATH} or {env: NAME}")
        return self

    def ref(self, base: Path) -> SecretRef:
        return SecretRef(file=resolve(base, self.file)) if self.file else SecretRef(env=self.env)


class KubeconfigRef(Strict):
    """How to reach a cluster: a kubeconfig file, or a Secret on the Control Plane holding one."""

    model_config = Strict.model_config | {
        "json_schema_extra": {
            "oneOf": [{"required": ["kubeconfig"]}, {"required": ["kubeconfigSecretRef"]}]
        }
    }

    kubeconfig: Text | None = Field(None, description="A kubeconfig file, relative to the config.")
    kubeconfig_secret_ref: KubeconfigSecretRef | None = Field(
        None, description="A Secret on the Control Plane holding a kubeconfig."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> KubeconfigRef:
        if (self.kubeconfig is None) == (self.kubeconfig_secret_ref is None):
            raise problem(
                "needs kubeconfig or kubeconfigSecretRef",
                "name a kubeconfig file or a Secret holding one",
            )
        return self

    def ref(self, base: Path) -> SecretRef:
        if self.kubeconfig is not None:
            return SecretRef(file=resolve(base, self.kubeconfig))
        assert self.kubeconfig_secret_ref is not None
        return self.kubeconfig_secret_ref.ref()


class OwnKubeconfig(Strict):
    """A service's own identity on the Control Plane: a kubeconfig file, never a Secret."""

    kubeconfig: Text = Field(
        description="The service's own kubeconfig file, relative to the config."
    )


class CredentialsSecret(Strict):
    """A Secret with Git credentials: username and password, or ssh-privatekey and known_hosts."""

    namespace: Name | None = Field(None, description="Namespace of the Secret.")
    name: SECRET_NAME = Field(description="Name of the Secret.")


class GitCredentials(Strict):
    """Git credentials: a Secret on the Control Plane, or a user name and password, or SSH files.
    Without them the repository is read anonymously."""

    secret_ref: CredentialsSecret | None = Field(
        None,
        description="A Secret with keys username and password, or ssh-privatekey and known_hosts.",
    )
    username: Text | None = Field(None, description="User name for HTTPS.")
    password: SecretSource | None = Field(None, description="Password or token for HTTPS.")
    ssh_key_file: Text | None = Field(None, description="SSH private key file.")
    known_hosts_file: Text | None = Field(
        None, description="known_hosts file with the Git host's keys (never trusted on first use)."
    )

    def ref(self, base: Path) -> GitCredentialsRef:
        secret = self.secret_ref
        return GitCredentialsRef(
            secret=SecretRef(namespace=secret.namespace, name=secret.name) if secret else None,
            username=self.username,
            password=self.password.ref(base) if self.password else None,
            ssh_key_file=resolve(base, self.ssh_key_file) if self.ssh_key_file else None,
            known_hosts_file=resolve(base, self.known_hosts_file)
            if self.known_hosts_file
            else None,
        )
