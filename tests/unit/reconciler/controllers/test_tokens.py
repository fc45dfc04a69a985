"""Binder token renewal: when a token is due, what is read from its Secret, and the settings."""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from joserfc import jwt
from joserfc.jwk import OctKey
from kubernetes import client

from klutch_gitops.config import TokenRenewal
from klutch_gitops.config_file import defaults, parse_config
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, Resource
from reconciler.controllers import tokens
from reconciler.controllers.tokens import (
    INVALID_REASON,
    MAX_WAIT_SECONDS,
    TokenRenewer,
    TokenTimes,
    binder_user,
    renewal_delay,
    token_times,
)

DAY = 24 * 3600.0
MARKER = "t0ken"  # stands for a token; must never show up in an error


def token(**claims: Any) -> str:
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key("k" * 32))


def kubeconfig(has_token: bool = True, current: str = "ctx") -> dict[str, Any]:
    user = {"token": MARKER} if has_token else {"client-certificate": "x"}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": current,
        "clusters": [{"name": "cp", "cluster": {"server": "https://cp.example:6443"}}],
        "users": [{"name": "other", "user": {"token": "not-this"}}, {"name": "me", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "cp", "user": "me"}}],
    }


def secret(data: dict[str, str], version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": "klutch-binder-kubeconfig",
            "namespace": "cluster-a",
            "resourceVersion": version,
        },
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


# -- when ---------------------------------------------------------------------------------------


def test_by_default_a_token_is_due_when_a_third_of_its_lifetime_is_left() -> None:
    issued, expires = 1000.0, 1000.0 + DAY
    assert renewal_delay(issued, issued, expires, None) == pytest.approx(DAY * 2 / 3)
    assert renewal_delay(issued + DAY / 2, issued, expires, None) == pytest.approx(DAY / 6)
    assert renewal_delay(expires - DAY / 3, issued, expires, None) == 0.0


def test_a_configured_threshold_is_the_time_left_at_renewal() -> None:
    issued, expires = 0.0, 600.0
    assert renewal_delay(10.0, issued, expires, 1200.0) == 0.0  # a short token: due at once
    assert renewal_delay(0.0, 0.0, DAY, 8 * 3600.0) == pytest.approx(16 * 3600.0)


def test_an_expired_token_is_due_now() -> None:
    assert renewal_delay(5000.0, 0.0, 600.0, None) == 0.0


# -- what ---------------------------------------------------------------------------------------


def test_token_times_come_from_the_unverified_payload() -> None:
    assert token_times(token(iat=100, exp=700, sub="x")) == TokenTimes(100.0, 700.0)


@pytest.mark.parametrize(
    "value",
    ["not-a-jwt", "a.b.c", token(exp=700), token(iat=700, exp=100), token(iat="soon", exp=700)],
)
def test_a_token_without_usable_times_is_refused(value: str) -> None:
    with pytest.raises(KlutchError) as raised:
        token_times(value)
    assert "token" in raised.value.message
    assert "bind again" in raised.value.fix


def test_the_current_contexts_user_holds_the_token_and_takes_the_new_one() -> None:
    config, user = binder_user(secret({"kubeconfig": yaml.safe_dump(kubeconfig())}))
    assert user["token"] == MARKER
    user["token"] = "renewed"
    assert config["users"][1]["user"]["token"] == "renewed"
    assert config["users"][0]["user"]["token"] == "not-this"
    assert config["clusters"][0]["cluster"]["server"] == "https://cp.example:6443"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({}, "no key 'kubeconfig'"),
        ({"kubeconfig": "users: [t0ken-secret\n  : :"}, "not valid YAML"),
        ({"kubeconfig": "this: is not a kubeconfig"}, "no token"),
        ({"kubeconfig": "- a list"}, "no token"),
        ({"kubeconfig": yaml.safe_dump(kubeconfig(current="gone"))}, "no token"),
        ({"kubeconfig": yaml.safe_dump(kubeconfig(has_token=False))}, "no token"),
    ],
)
def test_an_unusable_kubeconfig_is_named_without_its_content(
    data: dict[str, str], expected: str
) -> None:
    with pytest.raises(KlutchError) as raised:
        binder_user(secret(data))
    assert expected in raised.value.message
    assert MARKER not in str(raised.value)


# -- the controller, without a cluster ------------------------------------------------------------

KEY = ("cluster-a", "klutch-binder-kubeconfig")


class Recorder(Kube):
    """Records the Events it is asked to create; any other call would fail (no server)."""

    def __init__(self) -> None:
        super().__init__(client.ApiClient(client.Configuration(host="http://127.0.0.1:9")))
        self.created: list[dict] = []

    def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict:
        self.created.append(dict(obj))
        # named from generateName, as the apiserver does: the recorder patches repeats by name
        meta = {**obj["metadata"], "name": f"{obj['metadata']['generateName']}{len(self.created)}"}
        return {**obj, "metadata": meta}


def renewer(settings: TokenRenewal, cached: dict[str, Any]) -> tuple[TokenRenewer, Recorder]:
    """A renewer whose watch cache holds ``cached``."""
    admin = Recorder()
    controller = TokenRenewer(admin, settings)
    controller.secrets.cache[KEY] = cached
    return controller, admin


def with_token(value: str, version: str = "1") -> dict[str, Any]:
    config = kubeconfig()
    config["users"][1]["user"]["token"] = value
    return secret({"kubeconfig": yaml.safe_dump(config)}, version)


def test_a_fresh_token_is_checked_again_when_due_not_renewed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = time.time()
    controller, _ = renewer(defaults().binder_tokens, with_token(token(iat=now, exp=now + DAY)))
    monkeypatch.setattr(tokens, "binder_token", lambda *_: pytest.fail("renewed too early"))
    scheduled: list[float] = []
    monkeypatch.setattr(controller.queue, "add_after", lambda _key, delay: scheduled.append(delay))
    controller.check(KEY)
    assert scheduled == [MAX_WAIT_SECONDS]  # due in 16h: looked at again within the hour


def test_a_token_capped_below_the_threshold_is_not_written(monkeypatch: pytest.MonkeyPatch) -> None:
    now = time.time()
    controller, _ = renewer(TokenRenewal(3600, 1200), with_token(token(iat=now, exp=now + 600)))
    monkeypatch.setattr(tokens, "binder_token", lambda *_: token(iat=now, exp=now + 900))
    with pytest.raises(KlutchError, match="issued a token for 900s, which is due"):
        controller.check(KEY)


def test_a_broken_secret_is_reported_once_per_version(caplog: pytest.LogCaptureFixture) -> None:
    broken = secret({"kubeconfig": f"users: [{MARKER}"})
    controller, admin = renewer(defaults().binder_tokens, broken)
    with caplog.at_level(logging.WARNING, logger="reconciler.controllers.tokens"):
        controller.check(KEY)
        controller.check(KEY)
        controller.secrets.cache[KEY] = secret({"kubeconfig": "{}"}, version="2")
        controller.check(KEY)
    assert controller.events.flush()  # the recorder writes in a thread of its own
    assert [e["reason"] for e in admin.created] == [INVALID_REASON, INVALID_REASON]
    first = admin.created[0]
    assert first["involvedObject"]["kind"] == "Secret"
    assert first["involvedObject"]["name"] == "klutch-binder-kubeconfig"
    assert "cluster-a/klutch-binder-kubeconfig cannot be renewed" in first["message"]
    assert "not valid YAML" in first["message"]
    assert len(caplog.records) == 2
    assert MARKER not in caplog.text + str(admin.created)


# -- settings -----------------------------------------------------------------------------------

BASE = "controlPlane: {kubeconfig: cp.kubeconfig}\n"


def test_renewal_settings_default_to_a_day_and_a_third(tmp_path: Path) -> None:
    assert parse_config(BASE, "c.yaml", tmp_path).binder_tokens == TokenRenewal(DAY, None)
    configured = parse_config(
        BASE + "binderTokens: {lifetime: 12h, renewBefore: 90m}", "c.yaml", tmp_path
    )
    assert configured.binder_tokens == TokenRenewal(12 * 3600.0, 5400.0)


def test_every_renewal_setting_problem_is_reported_at_once(tmp_path: Path) -> None:
    bad = BASE + "binderTokens: {lifetime: 5m, renewBefore: 1h, jitter: 1s}"
    with pytest.raises(KlutchError) as raised:
        parse_config(bad, "bad.yaml", tmp_path)
    text = str(raised.value)
    assert text.startswith("bad.yaml: 3 problem(s)")
    assert "binderTokens.jitter: unknown field" in text
    assert "binderTokens.lifetime: is shorter than the TokenRequest API's minimum" in text
    assert "binderTokens.renewBefore: must be above 0 and below the lifetime (300s)" in text


def test_a_threshold_as_long_as_the_lifetime_would_renew_forever(tmp_path: Path) -> None:
    with pytest.raises(KlutchError, match="renewBefore: must be above 0"):
        parse_config(BASE + "binderTokens: {renewBefore: 24h}", "c.yaml", tmp_path)
