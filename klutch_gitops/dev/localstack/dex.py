"""Dex configuration for the local stack: an https issuer, one connector and three clients.

- ``klutch-gitops``: a confidential client for automation (password grant, tests, bots);
- ``klutch-bind``: a public client for the CLI (device flow, or a browser flow with a localhost
  callback);
- ``klutch-bind-web``: the bind API's own confidential client for Klutch's browser bind flow,
  redirecting to ``/callback`` on the port the stack reserves for the bind API.
The password grant goes to the connector (the stack's LDAP directory), which supplies the groups.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

AUTOMATION_CLIENT = "klutch-gitops"
CLI_CLIENT = "klutch-bind"
WEB_CLIENT = "klutch-bind-web"
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


def render(
    issuer: str,
    listen: str,
    tls_cert: Path,
    tls_key: Path,
    connector: dict[str, Any],
    automation_secret: str,
    web_secret: str,
    bind_api_port: int,
) -> dict[str, Any]:
    return {
        "issuer": issuer,
        "storage": {"type": "memory"},
        "web": {"https": listen, "tlsCert": str(tls_cert), "tlsKey": str(tls_key)},
        "logger": {"level": "info", "format": "json"},
        "oauth2": {
            "passwordConnector": connector["id"],
            "skipApprovalScreen": True,
            "responseTypes": ["code"],
            "grantTypes": ["authorization_code", "refresh_token", "password", DEVICE_GRANT],
        },
        "connectors": [connector],
        "staticClients": [
            {
                "id": AUTOMATION_CLIENT,
                "name": "klutch-gitops automation",
                "secret": automation_secret,
                "redirectURIs": ["http://127.0.0.1/callback"],
            },
            {
                "id": CLI_CLIENT,
                "name": "klutch-bind CLI",
                "public": True,
                # No registered redirect URIs: Dex then accepts the device flow's own
                # /device/callback and http://localhost on any port, the loopback redirect of
                # RFC 8252 that the CLI's one-shot callback server needs.
            },
            {
                "id": WEB_CLIENT,
                "name": "klutch-gitops bind API",
                "secret": web_secret,
                "redirectURIs": [
                    f"{scheme}://127.0.0.1:{bind_api_port}/callback" for scheme in ("http", "https")
                ],
            },
        ],
    }
