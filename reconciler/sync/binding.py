"""Turn a registration (config entry or RepositoryBinding) into what a sync needs at run time:
API clients for both clusters, Git credentials, webhook secrets, the forge API token.

References are resolved on every (re)start of a binding, so rotating a Secret and touching the
RepositoryBinding is enough to pick up new credentials. Resolved secrets stay in memory only.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from klutch_gitops import tenant_kubeconfig
from klutch_gitops.config import GitCredentialsRef, RepositorySpec, SecretRef
from klutch_gitops.errors import KlutchError
from klutch_gitops.git.credentials import Credentials
from klutch_gitops.kube.client import Kube, api_client
from klutch_gitops.settings import secret_data, secret_value


@dataclass
class Binding:
    spec: RepositorySpec
    app: Kube  # the App Cluster, with the registration's App kubeconfig
    control_plane: Kube  # the Control Plane, with the binding's own least-privilege identity
    credentials: Credentials | None
    webhook_secrets: tuple[bytes, ...]
    forge_token: str | None = None  # posts pull-request plans


class Resolver:
    """Reads references: files, environment variables, and Secrets on the Control Plane."""

    def __init__(self, admin: Kube, secrets_dir: Path) -> None:
        self.admin = admin
        self.secrets_dir = secrets_dir

    def value(self, ref: SecretRef, what: str, default_namespace: str) -> bytes:
        """A referenced secret; a Secret without a namespace is the registration's."""
        return secret_value(
            ref,
            what,
            program="the reconciler",
            control_plane=self.admin,
            namespace=default_namespace,
        )

    def credentials(
        self, ref: GitCredentialsRef | None, what: str, namespace: str
    ) -> Credentials | None:
        if ref is None:
            return None
        if ref.secret is not None:
            secret = secret_data(
                self.admin, ref.secret.namespace or namespace, ref.secret.name or "", what
            )
            data = {key: value.decode() for key, value in secret.items()}
            key_file = (
                self._private_file("ssh-key", data["ssh-privatekey"])
                if "ssh-privatekey" in data
                else None
            )
            hosts_file = (
                self._private_file("known-hosts", data["known_hosts"])
                if "known_hosts" in data
                else None
            )
            return Credentials(
                username=data.get("username"),
                password=data.get("password"),
                ssh_key_file=key_file,
                known_hosts_file=hosts_file,
            )
        password = (
            self.value(ref.password, f"{what}.password", namespace).decode()
            if ref.password
            else None
        )
        return Credentials(
            username=ref.username,
            password=password,
            ssh_key_file=ref.ssh_key_file,
            known_hosts_file=ref.known_hosts_file,
        )

    def _private_file(self, prefix: str, content: str) -> Path:
        """ssh needs key files on disk: write them owner-only, outside any repository.

        Named after a digest of the content, so the restarts of a binding (every token renewal,
        every webhook visit of another replica's registration) reuse one file, not one each.
        """
        self.secrets_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        text = content if content.endswith("\n") else content + "\n"
        path = self.secrets_dir / f"{prefix}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"
        if not path.exists():
            handle, name = tempfile.mkstemp(prefix=f".{prefix}-", dir=self.secrets_dir)
            with os.fdopen(handle, "w") as out:  # mkstemp: owner-only from the start
                out.write(text)
            os.replace(name, path)
        return path

    def kube_client(self, ref: SecretRef, what: str, namespace: str) -> client.ApiClient:
        """A client for a referenced kubeconfig, checked again on every (re)start.

        A file named in the platform team's config goes through the kubernetes client's loader
        (exec plugins and ``tokenFile`` reloading work there, paths relative to the file). Every
        other kubeconfig (a Secret, which a RepositoryBinding always names, or an environment
        variable) is parsed strictly by ``tenant_kubeconfig``: a refused field never reaches the
        loader and becomes the registration's error (a RepositoryBinding's SecretValid).
        """
        if ref.file is None:
            text = self.value(ref, what, namespace)
            try:
                return tenant_kubeconfig.load_client(text)
            except KlutchError as error:
                raise KlutchError(
                    f"{what} is not a usable kubeconfig: {error.message}", error.fix
                ) from None
        try:
            return api_client(ref.file)
        except KlutchError as error:  # api_client checked the file: its message names it
            raise KlutchError(f"{what}: {error.message}", error.fix) from None
        except Exception as error:  # the kubeconfig loader raises many types for bad input
            raise KlutchError(
                f"{what} is not a usable kubeconfig ({type(error).__name__}: {error})"[:500],
                f"fix the kubeconfig file {ref.file}",
            ) from None

    def binding(self, spec: RepositorySpec) -> Binding:
        namespace = spec.consumer_namespace
        what = f"repository {spec.name}"
        app = self.kube_client(spec.app_kubeconfig, f"{what}: App Cluster kubeconfig", namespace)
        control_plane = self.kube_client(
            spec.control_plane_kubeconfig, f"{what}: Control Plane kubeconfig", namespace
        )
        webhook = (
            (self.value(spec.webhook_secret, f"{what}: webhook secret", namespace),)
            if spec.webhook_secret
            else ()
        )
        forge_token = (
            self.value(spec.forge_token, f"{what}: forge token", namespace).decode().strip()
            if spec.forge_token
            else None
        )
        return Binding(
            spec=spec,
            app=Kube(app),
            control_plane=Kube(control_plane),
            credentials=self.credentials(spec.credentials, what, namespace),
            webhook_secrets=webhook,
            forge_token=forge_token or None,
        )
