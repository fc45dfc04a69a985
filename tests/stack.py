"""The real local stack for a test tier: started by a fixture of the tier's own scope."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from klutch_gitops.dev.localstack.stack import LocalStack, StackInfo, programs
from klutch_gitops.errors import KlutchError


def running_stack(directory: Path, tier: str) -> Iterator[LocalStack]:
    """Start a stack in ``directory`` for the fixture that yields from this, stop it after; a
    missing program fails the tier at once with the command that builds it."""
    try:
        programs()
    except KlutchError as error:
        pytest.fail(f"{tier} tests need the stack's programs: {error}", pytrace=False)
    stack = LocalStack(directory)
    stack.start()
    yield stack
    stack.stop()


def admin_clients(stack: StackInfo) -> dict[str, client.ApiClient]:
    """An admin API client per cluster: ``app`` and ``control-plane``."""
    return {
        name: config.new_client_from_config(config_file=info.kubeconfig)
        for name, info in stack.clusters.items()
    }
