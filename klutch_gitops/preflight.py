"""Checks before a command starts work: can the cluster it names be reached, are the
certificate files it names usable, is its listen address free?

Without them a closed port surfaces deep inside a controller's start as urllib3's
``MaxRetryError`` traceback, and a missing CA file as ssl's ``FileNotFoundError`` without a file
name: neither names the field, the file or the fix. And a port in use only made the server's
thread log an error while the process carried on without health checks or webhooks.
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from klutch_gitops.errors import KlutchError, short_reason
from klutch_gitops.kube.client import api_client

TIMEOUT_SECONDS = 10.0


def reach_cluster(kubeconfig: Path, what: str, context: str | None = None) -> None:
    """Raise a KlutchError naming the server, the kubeconfig and ``what`` (e.g. the field) when
    the cluster does not answer GET /version, or refuses the kubeconfig's credentials."""
    try:
        api = api_client(kubeconfig, context)
    except KlutchError as error:
        raise KlutchError(f"{what}: {error.message}", error.fix) from None
    server = api.configuration.host
    try:
        with _quiet_retries():
            client.VersionApi(api).get_code(_request_timeout=TIMEOUT_SECONDS)
    except urllib3.exceptions.HTTPError as error:
        raise unreachable(error, server, kubeconfig, what) from None
    except ApiException as error:
        raise refused(error, server, kubeconfig, what) from None
    finally:
        api.close()


def unreachable(
    error: urllib3.exceptions.HTTPError, server: str, kubeconfig: Path, what: str
) -> KlutchError:
    """No answer: a closed port, a name that does not resolve, a certificate not trusted."""
    reason = getattr(error, "reason", None) or error
    fix = f"start the cluster, or fix the server URL in {kubeconfig}"
    if isinstance(reason, urllib3.exceptions.SSLError):
        reason = reason.args[0] if reason.args else reason  # ssl's own: [SSL: …] …
        fix = f"fix certificate-authority(-data) of the cluster in {kubeconfig}"
    return KlutchError(
        f"{what}: cannot reach {server} (kubeconfig {kubeconfig}): {short_reason(reason)}", fix
    )


def refused(error: ApiException, server: str, kubeconfig: Path, what: str) -> KlutchError:
    """An answer, but not the version: unknown credentials (401), or not an API server."""
    answer = f"{error.status} {error.reason}"
    if error.status == 401:
        return KlutchError(
            f"{what}: {server} refused the credentials of kubeconfig {kubeconfig}: {answer}",
            f"renew the credentials in {kubeconfig}",
        )
    return KlutchError(
        f"{what}: {server} (kubeconfig {kubeconfig}) answered GET /version with {answer}",
        f"point the server URL in {kubeconfig} at the Kubernetes API server",
    )


@contextmanager
def _quiet_retries() -> Iterator[None]:
    """urllib3 logs each retry as a warning; the one error after them says it all."""
    pool_logger = logging.getLogger("urllib3.connectionpool")
    level = pool_logger.level
    pool_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        pool_logger.setLevel(level)


def ca_file(path: Path | None, where: str) -> None:
    """``where`` (a field or option) names a PEM bundle of CA certificates ssl can load."""
    if path is None:
        return
    try:
        ssl.create_default_context(cafile=str(path))
    except OSError as error:  # ssl.SSLError is one, FileNotFoundError too
        raise KlutchError(
            f"{where}: cannot load CA certificates from {path}: {error.strerror or error}",
            "point it at a PEM file of CA certificates",
        ) from None


def certificate_pair(cert: Path | None, key: Path | None, where: str) -> None:
    """``where``'s certificate and key files (PEM) load, and belong together."""
    if cert is None or key is None:
        return
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(str(cert), str(key))
    except OSError as error:
        raise KlutchError(
            f"{where}: cannot load the certificate {cert} with the key {key}: "
            f"{error.strerror or error}",
            "point certFile and keyFile at a PEM certificate and its key",
        ) from None


def listen_address(listen: str, where: str) -> None:
    """``host:port`` (as ``serving.bounded_config`` splits it) that this process can bind now."""
    host, _, port = listen.rpartition(":")
    if not port.isdigit() or int(port) > 65535:
        raise KlutchError(
            f"{where}: {listen!r} is not host:port", "write it like 127.0.0.1:8080 or 0.0.0.0:8443"
        )
    try:
        family, kind, _, _, address = socket.getaddrinfo(
            host.strip("[]") or "127.0.0.1", int(port), type=socket.SOCK_STREAM
        )[0]
        with socket.socket(family, kind) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
            sock.bind(address)
    except OSError as error:  # socket.gaierror is one too
        raise KlutchError(
            f"{where}: cannot listen on {listen}: {error.strerror or error}",
            "choose a free port on an address of this host, or stop the process holding it",
        ) from None


def programs(directory: Path | None, where: str, names: tuple[str, ...]) -> None:
    """``directory`` (if given) holds each of ``names`` as an executable file."""
    if directory is None:
        return
    missing = [n for n in names if not os.access(directory / n, os.X_OK)]
    if missing:
        raise KlutchError(
            f"{where}: {directory} holds no executable {', '.join(missing)}",
            "point it at PostgreSQL's bin directory, e.g. /usr/lib/postgresql/16/bin",
        )


def directory(path: Path | None, where: str) -> None:
    """``path`` (if given) is a directory, or not there yet (it is made when needed)."""
    if path is not None and path.exists() and not path.is_dir():
        raise KlutchError(f"{where}: {path} is not a directory", "name a directory")
