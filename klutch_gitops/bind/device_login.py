"""``klutch-bind login --device``: the device authorization grant (RFC 8628), for a machine without
a browser; the person approves the login elsewhere while the CLI polls at the issuer's pace."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from klutch_gitops.errors import KlutchError
from klutch_gitops.oidc_client import Provider, describe_error, json_body, post_form

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
SLOW_DOWN_SECONDS = 5  # RFC 8628 §3.5: add 5 seconds to the interval on every slow_down


@dataclass(frozen=True)
class DeviceCode:
    """What the person needs to approve the login elsewhere, and what the CLI polls with."""

    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None
    interval: int
    expires_in: int


def start_device_authorization(
    http: httpx.Client, provider: Provider, client_id: str, scopes: str
) -> DeviceCode:
    if not provider.device_authorization_endpoint:
        raise KlutchError(
            f"the issuer {provider.issuer} offers no device authorization endpoint",
            "log in with --browser",
        )
    response = post_form(
        http, provider.device_authorization_endpoint, {"client_id": client_id, "scope": scopes}
    )
    body = json_body(response)
    if response.status_code != 200:
        raise KlutchError(
            f"the issuer refused the device authorization: {describe_error(body, response)}",
            f"check that the client {client_id!r} exists and may use the device flow",
        )
    return DeviceCode(
        device_code=body["device_code"],
        user_code=body["user_code"],
        verification_uri=body["verification_uri"],
        verification_uri_complete=body.get("verification_uri_complete"),
        interval=int(body.get("interval", 5)),
        expires_in=int(body["expires_in"]),
    )


def poll_device_token(
    http: httpx.Client,
    provider: Provider,
    client_id: str,
    device: DeviceCode,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Poll the token endpoint at the issuer's pace until the person approves or refuses."""
    interval = device.interval
    deadline = clock() + device.expires_in
    data = {"grant_type": DEVICE_GRANT, "device_code": device.device_code, "client_id": client_id}
    while True:
        response = post_form(http, provider.token_endpoint, data)
        body = json_body(response)
        if response.status_code == 200:
            return body
        error = body.get("error")
        if error == "slow_down":
            interval += SLOW_DOWN_SECONDS
        elif error == "access_denied":
            raise KlutchError(
                "the login was refused in the browser", "run 'klutch-bind login' again"
            )
        elif error == "expired_token":
            raise _expired()
        elif error != "authorization_pending":
            raise KlutchError(
                f"the issuer refused the device login: {describe_error(body, response)}",
                "run 'klutch-bind login' again",
            )
        if clock() + interval > deadline:
            raise _expired()
        sleep(interval)


def _expired() -> KlutchError:
    return KlutchError(
        "the user code expired before the login was approved",
        "run 'klutch-bind login' again and approve it in time",
    )
