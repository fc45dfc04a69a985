"""Checks before a command starts work: can the cluster it names be reached at all?

Without them a closed port surfaces deep inside a controller's start as urllib3's
``MaxRetryError`` traceback, naming neither the kubeconfig file nor the fix.
"""

from __future__ import annotations

import logging
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
        reason = short_reason(getattr(error, "reason", None) or error)
        raise KlutchError(
            f"{what}: cannot reach {server} (kubeconfig {kubeconfig}): {reason}",
            f"start the cluster, or fix the server URL in {kubeconfig}",
        ) from None
    except ApiException as error:
        raise KlutchError(
            f"{what}: {server} refused the credentials of kubeconfig {kubeconfig}: "
            f"{error.status} {error.reason}",
            f"renew the credentials in {kubeconfig}",
        ) from None
    finally:
        api.close()


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
