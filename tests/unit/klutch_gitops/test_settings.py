"""Secret references: one resolver for the reconciler and the bind API, and its errors."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from klutch_gitops.config import SecretRef
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.resources import SECRETS
from klutch_gitops.settings import secret_data, secret_value


class Secrets:
    """The Control Plane's Secrets, by namespace and name: all the resolver reads of a Kube."""

    def __init__(self, secrets: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.secrets = secrets
        self.reads: list[tuple[str, str]] = []

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any] | None:
        assert resource is SECRETS
        self.reads.append((namespace, name))
        return self.secrets.get((namespace, name))


def encoded(**values: str) -> dict[str, Any]:
    return {"data": {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}}


def control_plane(**secrets: dict[str, Any]) -> Kube:
    """Secrets named ``namespace__name``."""
    return Secrets({tuple(k.split("__")): v for k, v in secrets.items()})  # type: ignore[return-value]


def refused(**kwargs: Any) -> KlutchError:
    with pytest.raises(KlutchError) as caught:
        secret_value(**kwargs)
    return caught.value


def test_a_file_is_read_as_bytes(tmp_path: Path) -> None:
    (tmp_path / "token").write_bytes(b"s3cret\n")
    assert secret_value(SecretRef(file=tmp_path / "token"), "x", program="p") == b"s3cret\n"


def test_an_unreadable_file_names_the_field_the_file_and_the_fix(tmp_path: Path) -> None:
    error = refused(
        ref=SecretRef(file=tmp_path / "missing"), where="browser.clientSecret", program="p"
    )
    assert error.message == (
        f"browser.clientSecret: cannot read {tmp_path / 'missing'}: No such file or directory"
    )
    assert error.fix == "point the reference at a readable file"


def test_an_environment_variable_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KLUTCH_TEST_SECRET", "from-env")
    assert secret_value(SecretRef(env="KLUTCH_TEST_SECRET"), "x", program="p") == b"from-env"


def test_an_unset_variable_names_the_program_to_start_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KLUTCH_TEST_SECRET", raising=False)
    error = refused(
        ref=SecretRef(env="KLUTCH_TEST_SECRET"), where="metricsToken", program="the bind API"
    )
    assert error.message == "metricsToken: environment variable KLUTCH_TEST_SECRET is not set"
    assert error.fix == "export KLUTCH_TEST_SECRET before starting the bind API"


def test_a_secret_key_is_decoded_and_its_namespace_defaults() -> None:
    admin = control_plane(tenant__hook=encoded(secret="abc", other="x"))
    ref = SecretRef(name="hook", key="secret")
    assert secret_value(ref, "w", program="p", control_plane=admin, namespace="tenant") == b"abc"
    ref = SecretRef(namespace="tenant", name="hook", key="other")
    assert secret_value(ref, "w", program="p", control_plane=admin, namespace="else") == b"x"
    assert admin.reads == [("tenant", "hook"), ("tenant", "hook")]  # type: ignore[attr-defined]


def test_a_missing_secret_or_key_names_what_is_there() -> None:
    admin = control_plane(tenant__hook=encoded(secret="abc"))
    error = refused(
        ref=SecretRef(name="gone", key="k"),
        where="repository r: webhook secret",
        program="p",
        control_plane=admin,
        namespace="tenant",
    )
    assert error.message == (
        "repository r: webhook secret: Secret tenant/gone not found on the Control Plane"
    )
    assert error.fix == "create the Secret or fix the reference"
    error = refused(
        ref=SecretRef(name="hook", key="token"),
        where="w",
        program="p",
        control_plane=admin,
        namespace="tenant",
    )
    assert error.message == "w: Secret tenant/hook has no key 'token' (keys: secret)"
    assert error.fix == "fix the key in the reference"


def test_a_secret_reference_without_a_control_plane_is_refused() -> None:
    error = refused(ref=SecretRef(name="s", key="k"), where="browser.key", program="bp")
    assert error.message == "browser.key: bp does not read Secrets, so Secret s cannot be used"
    assert error.fix == "use {file: PATH} or {env: NAME}"


def test_a_reference_that_names_nothing_is_refused() -> None:
    error = refused(ref=SecretRef(), where="w", program="p", control_plane=control_plane())
    assert error.message == "w: the reference names no file, environment variable or Secret key"


def test_secret_data_decodes_every_key_and_refuses_what_is_not_base64() -> None:
    admin = control_plane(
        ns__git=encoded(username="bot", password="pw"), ns__bad={"data": {"k": "%%%"}}
    )
    assert secret_data(admin, "ns", "git", "w") == {"username": b"bot", "password": b"pw"}
    assert secret_data(control_plane(ns__empty={}), "ns", "empty", "w") == {}
    with pytest.raises(KlutchError, match="w: Secret ns/bad holds data that is not base64"):
        secret_data(admin, "ns", "bad", "w")
