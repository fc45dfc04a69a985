"""Kubeconfig files with embedded credentials, so they work from any directory."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def render(
    name: str,
    server: str,
    ca_pem: bytes,
    cert_pem: bytes,
    key_pem: bytes,
    namespace: str = "default",
) -> dict[str, Any]:
    """A kubeconfig with one cluster, user and context, all called ``name``."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": name,
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": name,
                "user": {
                    "client-certificate-data": _b64(cert_pem),
                    "client-key-data": _b64(key_pem),
                },
            }
        ],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}
        ],
        "current-context": name,
    }


def write(path: Path, config: dict[str, Any]) -> Path:
    """Write ``config`` readable by the owner only: it holds a private key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
