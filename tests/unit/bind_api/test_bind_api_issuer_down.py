"""An unreachable identity provider is a 503 with Retry-After, never a 401 that sends a person to
log in again: both when no key is known yet and when the token names a key it rotated to."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from joserfc.jwk import RSAKey
from kubernetes import client

from bind_api.app import create_app
from bind_api.config import BindApiConfig
from bind_api.dependencies import ISSUER_RETRY_AFTER
from bind_api.oidc import REFETCH_INTERVAL, IssuerUnavailable
from klutch_gitops.kube.client import Kube
from tests.unit.bind_api.test_oidc import (
    AUDIENCE,
    ISSUER,
    RSA,
    Clock,
    FakeIssuer,
    make_verifier,
    mint,
    public,
)

BINDING = {"clusterId": "c-1", "apis": ["postgresqlinstances.anynines.com"]}


def test_a_bind_while_the_issuer_is_down_is_a_503_that_changes_nothing() -> None:
    issuer = FakeIssuer(RSA)
    issuer.down = True
    config = BindApiConfig(Path("unused.kubeconfig"), ISSUER, (AUDIENCE,))
    # a Control Plane client that would fail any request: the 503 comes before the first
    admin = Kube(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
    app = create_app(config, admin, make_verifier(issuer, Clock()))
    with TestClient(app) as api:
        answer = api.post(
            "/api/v1/bindings", json=BINDING, headers={"Authorization": f"Bearer {mint()}"}
        )
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == str(ISSUER_RETRY_AFTER)
    detail = answer.json()["detail"]
    assert detail.startswith("the identity provider is unreachable")
    assert "nothing was changed; try again when it is back" in detail
    assert ISSUER in detail


def test_a_key_rotated_while_the_issuer_went_down_is_unavailable_not_refused() -> None:
    issuer, clock = FakeIssuer(RSA), Clock()
    verifier = make_verifier(issuer, clock)
    assert verifier.verify(mint()).subject  # rsa-1 cached
    rotated = RSAKey.generate_key(2048, parameters={"kid": "rsa-2", "use": "sig"})
    issuer.jwks, issuer.down = [public(rotated)], True  # restarted with a new key, then down
    clock.now += REFETCH_INTERVAL + 1

    with pytest.raises(IssuerUnavailable, match=ISSUER):
        verifier.verify(mint(rotated))
    assert verifier.verify(mint()).subject  # known keys still verify meanwhile
    clock.now += 1
    with pytest.raises(IssuerUnavailable):  # rate limited: the last failure still stands
        verifier.verify(mint(rotated))

    issuer.down = False
    clock.now += REFETCH_INTERVAL
    assert verifier.verify(mint(rotated)).subject
