"""Turn a registration (config entry or RepositoryBinding) into its connection, what a sync needs
at run time: API clients for both clusters, Git credentials, webhook secrets, the forge API token.

References are resolved on every (re)start of a registration, so rotating a Secret and touching the
RepositoryBinding is enough to pick up new credentials. Resolved secrets stay in memory only.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from klutch_gitops import tenant_kubeconfig
from klutch_gitops.config import GitCredentialsRef, RegistrationSpec, SecretRef
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, api_client
from klutch_gitops.kube.shared import Caches
from klutch_gitops.settings import secret_data, secret_value
from reconciler.git.credentials import Credentials

# Connections a shared client keeps for reuse: every registration's apply writes in flight
# (reconciler.sync.apply: 8 per pass, 4 workers) and its informers' watches at once.
SHARED_POOL_CONNECTIONS = 64


@dataclass
class Connection:
    spec: RegistrationSpec
    app: Kube  # the App Cluster, with the registration's App kubeconfig
    control_plane: Kube  # the Control Plane, with the registration's own least-privilege identity
    credentials: Credentials | None
    webhook_secrets: tuple[bytes, ...]
    forge_token: str | None = None  # posts pull-request plans
    # the process's shared informers (the Resolver's); a Connection made elsewhere shares nothing
    caches: Caches = field(default_factory=Caches)


class Resolver:
    """Reads references: files, environment variables, and Secrets on the Control Plane."""

    def __init__(self, admin: Kube, secrets_dir: Path) -> None:
        self.admin = admin
        self.secrets_dir = secrets_dir
        self.caches = Caches()
        # identity -> the one client of it that registrations share, while any holds it
        self._clients: weakref.WeakValueDictionary[str, Kube] = weakref.WeakValueDictionary()
        self._clients_lock = threading.Lock()
        self._salt = secrets.token_bytes(32)  # identities are keyed digests: never guessable

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

        Named after a digest of the content, so the restarts of a registration (every token renewal,
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

    def kube_client(
        self, ref: SecretRef, what: str, namespace: str, text: bytes | None = None
    ) -> client.ApiClient:
        """A client for a referenced kubeconfig, checked again on every (re)start.

        A file named in the platform team's config goes through the kubernetes client's loader
        (exec plugins and ``tokenFile`` reloading work there, paths relative to the file). Every
        other kubeconfig (a Secret, which a RepositoryBinding always names, or an environment
        variable) is parsed strictly by ``tenant_kubeconfig``: a refused field never reaches the
        loader and becomes the registration's error (a RepositoryBinding's SecretValid).
        """
        if ref.file is None:
            text = self.value(ref, what, namespace) if text is None else text
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

    def kube(self, ref: SecretRef, what: str, namespace: str) -> Kube:
        """The client of a referenced kubeconfig, shared with every registration whose resolved
        kubeconfig is the same (``identity``): one connection pool and one set of informers per
        identity, not per registration. New content (a rotated Secret, a new certificate file)
        is a new identity, so a restarted registration never reads through the old one's."""
        text = self.value(ref, what, namespace) if ref.file is None else None
        identity = self.identity(ref, text)
        with self._clients_lock:
            found = self._clients.get(identity) if identity else None
        if found is not None:
            return found
        kube = Kube(self.kube_client(ref, what, namespace, text), identity=identity)
        if identity is None:
            return kube
        kube.widen_pool(SHARED_POOL_CONNECTIONS)
        with self._clients_lock:
            return self._clients.setdefault(identity, kube)

    def identity(self, ref: SecretRef, text: bytes | None) -> str | None:
        """A keyed digest of what the kubeconfig resolves to (never logged): the Secret's
        text, or a file's content with the certificate files it names (not ``tokenFile``:
        the client re-reads that itself). None where a file cannot be read: no sharing."""
        digest = hmac.new(self._salt, digestmod=hashlib.sha256)
        if ref.file is None:
            digest.update(b"text\0" + (text or b""))
            return digest.hexdigest()
        try:
            content = ref.file.read_bytes()
            digest.update(b"file\0" + str(ref.file.resolve()).encode() + b"\0" + content)
            for name in _referenced_files(yaml.safe_load(content)):
                digest.update(b"\0" + name.encode() + b"\0")
                digest.update((ref.file.parent / name).read_bytes())
        except (OSError, yaml.YAMLError, ValueError):
            return None
        return digest.hexdigest()

    def connection(self, spec: RegistrationSpec) -> Connection:
        namespace = spec.consumer_namespace
        what = f"repository {spec.name}"
        app = self.kube(spec.app_kubeconfig, f"{what}: App Cluster kubeconfig", namespace)
        control_plane = self.kube(
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
        return Connection(
            spec=spec,
            app=app,
            control_plane=control_plane,
            credentials=self.credentials(spec.credentials, what, namespace),
            webhook_secrets=webhook,
            forge_token=forge_token or None,
            caches=self.caches,
        )


CERTIFICATE_FIELDS = {
    "clusters": ("cluster", ("certificate-authority",)),
    "users": ("user", ("client-certificate", "client-key")),
}


def _referenced_files(kubeconfig: Any) -> list[str]:
    """The certificate files a kubeconfig names, sorted: their content is part of its identity."""
    names = set()
    for section, (entry, fields) in CERTIFICATE_FIELDS.items():
        for item in (kubeconfig or {}).get(section) or []:
            body = item.get(entry) if isinstance(item, dict) else None
            for name in fields:
                if isinstance(body, dict) and isinstance(body.get(name), str) and body[name]:
                    names.add(body[name])
    return sorted(names)
