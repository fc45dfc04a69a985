"""The API client for an accepted tenant kubeconfig (I/O): it trusts only the kubeconfig's CA,
sends only its credentials and never follows a redirect."""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import urllib3
from kubernetes import client

from klutch_gitops.tenant_kubeconfig.document import TenantKubeconfig


def api_client(kubeconfig: TenantKubeconfig) -> client.ApiClient:
    """An ApiClient that trusts only the kubeconfig's CA and sends only its credentials.

    The client's Configuration takes client certificates as file paths only, which urllib3 loads
    on every new connection. Instead the TLS context is built here, once: the CA from memory, the
    certificate and key from owner-only files in a private directory that is removed at once, and
    that context is handed to the client's connection pools.
    """
    configuration = client.Configuration(host=kubeconfig.server)
    configuration.verify_ssl = True
    # Also in the Configuration: a client built from it anew still trusts only this CA.
    configuration.ca_cert_data = kubeconfig.ca_pem.decode()
    configuration.tls_server_name = kubeconfig.tls_server_name
    # Never follow a redirect: the tenant's server could send the client to any plain-http
    # address inside the reconciler's network and read the answer back from the error it becomes.
    configuration.retries = urllib3.Retry(total=3, redirect=False)
    if kubeconfig.token is not None:
        configuration.api_key["BearerToken"] = f"Bearer {kubeconfig.token}"
    context = ssl.create_default_context(cadata=kubeconfig.ca_pem.decode())
    if kubeconfig.client_cert_pem is not None and kubeconfig.client_key_pem is not None:
        with _private_files(kubeconfig.client_cert_pem, kubeconfig.client_key_pem) as (cert, key):
            context.load_cert_chain(cert, key)
    api = client.ApiClient(configuration)
    api.rest_client.pool_manager.connection_pool_kw["ssl_context"] = context
    return api


@contextmanager
def _private_files(*contents: bytes) -> Iterator[tuple[str, ...]]:
    """Files only the owner can read, in a directory of their own, gone when the block ends."""
    directory = tempfile.mkdtemp(prefix="klutch-tenant-")  # mode 0700
    try:
        paths = []
        for index, content in enumerate(contents):
            path = os.path.join(directory, str(index))
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                out.write(content)
            paths.append(path)
        yield tuple(paths)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
