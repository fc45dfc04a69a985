"""The config models (klutch_gitops/models): strict types, one duration syntax, bounds, and every
problem at once as ``path: message — fix``. The first tests are the bugs issue 18 lists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from bind_api.config import parse_bind_api_config
from klutch_gitops.config_file import parse_config
from klutch_gitops.errors import KlutchError
from klutch_gitops.models.bind_api import BindApiConfig
from klutch_gitops.models.binding import RepositoryBindingSpec
from klutch_gitops.models.reconciler import ReconcilerConfig
from klutch_gitops.models.types import (
    DURATION_MAX_LENGTH,
    POSITIVE_DURATION_PATTERN,
    parse_duration,
)
from klutch_gitops.repository_config import from_repository_binding
from tests.unit.klutch_gitops.models.test_schemas import reachable

ROOT = Path(__file__).resolve().parents[4]
CRD = ROOT / "catalog" / "crds" / "gitops.klutch.anynines.com_repositorybindings.yaml"
BASE = "controlPlane: {kubeconfig: cp.kubeconfig}\n"
REPOSITORY = """repositories:
  - name: team-a
    url: https://git.example.com/team-a.git
    consumerNamespace: cluster-abc
    appNamespaces: [team-a]
    appCluster: {kubeconfig: app.kubeconfig}
    controlPlane: {kubeconfigSecretRef: {namespace: cluster-abc, name: binder}}
"""
BIND_API = (
    "controlPlane: {kubeconfig: cp.kubeconfig}\n"
    "oidc: {issuer: https://dex.example.com, audiences: [klutch-bind]}\n"
)


def refused(text: str, tmp_path: Path) -> str:
    with pytest.raises(KlutchError) as raised:
        parse_config(text, "c.yaml", tmp_path)
    return raised.value.message + "\n" + raised.value.fix


def binding(**spec: object) -> dict:
    return {
        "metadata": {"name": "orders", "namespace": "cluster-abc"},
        "spec": {
            "url": "https://git.example/team/orders.git",
            "appNamespaces": ["orders"],
            "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
            "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
            **spec,
        },
    }


def test_a_quoted_false_does_not_suspend(tmp_path: Path) -> None:
    """Before, ``bool("false")`` suspended the repository."""
    message = refused(BASE + REPOSITORY + '    suspend: "false"\n', tmp_path)
    assert "repositories[0].suspend: must be true or false, got 'false'" in message
    assert "write true or false, without quotes" in message
    with pytest.raises(KlutchError, match=r"spec\.suspend: must be true or false"):
        from_repository_binding(binding(suspend="false"))
    assert (
        parse_config(BASE + REPOSITORY + "    suspend: true\n", "c", tmp_path)
        .repositories[0]
        .suspend
    )


@pytest.mark.parametrize("key", ["pollInterval", "batchWindow"])
def test_a_zero_interval_is_refused_not_defaulted(key: str, tmp_path: Path) -> None:
    """Before, ``0s`` read as 0.0, and ``or 30.0`` made it the default without a word."""
    message = refused(BASE + f"{key}: 0s\n", tmp_path)
    assert f"c.yaml: {key}: '0s' must be above 0" in message
    assert "write a duration above 0" in message
    assert getattr(
        parse_config(BASE + f"{key}: 1ms\n", "c", tmp_path), re.sub(r"([A-Z])", r"_\1", key).lower()
    ) == pytest.approx(0.001)


@pytest.mark.parametrize("listen", ["nonsense", "127.0.0.1", "0.0.0.0:99999", "host:http", ":"])
def test_listen_must_be_host_and_port(listen: str, tmp_path: Path) -> None:
    message = refused(BASE + f"listen: '{listen}'\n", tmp_path)
    assert f"listen: '{listen}' is not valid" in message
    assert "write host:port" in message
    with pytest.raises(KlutchError, match="listen: "):
        parse_bind_api_config(BIND_API + f"listen: '{listen}'\n", "b.yaml", tmp_path)


@pytest.mark.parametrize("listen", ["0.0.0.0:8080", "127.0.0.1:0", "[::]:8443", ":8080", "a.b:1"])
def test_listen_addresses_that_serve(listen: str, tmp_path: Path) -> None:
    assert parse_config(BASE + f"listen: '{listen}'\n", "c", tmp_path).listen == listen


DURATIONS = {
    "500ms": 0.5,
    "30s": 30.0,
    "1.5h": 5400.0,
    "1m30s": 90.0,
    "1h0m0s": 3600.0,
    "0.5s": 0.5,
    "0s1ms": 0.001,
    "0s": None,
    "0.0m": None,
    "0ms0s": None,
    "30": None,
    "-1s": None,
    "1d": None,
    "1 m": None,
    "1us": None,
    "s": None,
    ".5s": None,
    "1m30": None,
    "": None,
    "1" * 31 + "s": 1.1111111111111111e30,
    "1" * 32 + "s": None,
}


@pytest.mark.parametrize(("text", "seconds"), DURATIONS.items())
def test_one_duration_syntax_in_the_model_the_crd_and_the_schemas(
    text: str, seconds: float | None
) -> None:
    """``1m30s`` was allowed by the CRD's pattern and refused by the code; now the model, the
    CRD's pattern and the JSON Schemas' pattern accept exactly the same positive durations."""
    crd = yaml.safe_load(CRD.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    crd_field = crd["properties"]["spec"]["properties"]["pollInterval"]
    assert crd_field["pattern"] == POSITIVE_DURATION_PATTERN
    by_schema = bool(re.search(crd_field["pattern"], text)) and len(text) <= crd_field["maxLength"]
    try:
        ours: float | None = parse_duration(text)
    except Exception:
        ours = None
    assert ours == (pytest.approx(seconds) if seconds is not None else None)
    assert by_schema == (seconds is not None)
    assert crd_field["maxLength"] == DURATION_MAX_LENGTH


def test_a_duration_is_a_string(tmp_path: Path) -> None:
    assert "pollInterval: must be a duration like 30s, got 30" in refused(
        BASE + "pollInterval: 30\n", tmp_path
    )


def test_numbers_and_strings_are_not_coerced(tmp_path: Path) -> None:
    message = refused(BASE + 'workers: "4"\nbot: {name: 7}\n', tmp_path)
    assert "workers: must be a whole number, got '4'" in message
    assert "bot.name: must be a string, got 7" in message
    assert "workers: 65 is not a number from 1 to 64" in refused(BASE + "workers: 65\n", tmp_path)


def test_an_unknown_key_names_the_nearest_known_one(tmp_path: Path) -> None:
    message = refused(BASE + "pollIntervall: 1s\n", tmp_path)
    assert message.startswith("c.yaml: pollIntervall: unknown field")
    assert "did you mean pollInterval?" in message
    assert "known fields here: apiVersion, batchWindow" in message
    nested = refused(BASE + REPOSITORY + "    writeback: {mode: files}\n", tmp_path)
    assert "repositories[0].writeback: unknown field" in nested
    assert "did you mean writeBack?" in nested


def test_rules_across_fields_are_reported_with_the_field_errors(tmp_path: Path) -> None:
    """A rule that uses only valid fields is reported beside the invalid ones; a rule that uses
    an invalid field is not guessed at."""
    text = BASE + "binderTokens: {lifetime: 5m, renewBefore: 1h, jitter: 1s}\nworkers: x\n"
    message = refused(text, tmp_path)
    assert message.startswith("c.yaml: 4 problem(s)")
    assert "binderTokens.lifetime: is shorter than the TokenRequest API's minimum" in message
    assert "binderTokens.renewBefore: must be above 0 and below the lifetime (300s)" in message
    message = refused(BASE + "binderTokens: {lifetime: soon, renewBefore: 30h}\n", tmp_path)
    assert "binderTokens.lifetime: 'soon' is not a duration" in message
    assert "renewBefore" not in message


def test_secret_references_are_exactly_one_of_three(tmp_path: Path) -> None:
    message = refused(BASE + "metricsToken: {file: a, env: B}\n", tmp_path)
    assert "metricsToken: needs exactly one of file, env, secretRef" in message
    assert "metricsToken.env: 'not a name' is not valid" in refused(
        BASE + "metricsToken: {env: not a name}\n", tmp_path
    )


def test_a_status_branch_that_is_the_followed_one_would_loop(tmp_path: Path) -> None:
    text = BASE + REPOSITORY + "    writeBack: {mode: branch, branch: main}\n"
    assert "repositories[0]: writeBack.branch must differ from branch" in refused(text, tmp_path)
    with pytest.raises(KlutchError, match=r"spec: writeBack\.branch must differ from branch"):
        from_repository_binding(binding(writeBack={"mode": "branch", "branch": "main"}))


def test_a_binding_with_an_unknown_field_is_refused_naming_it() -> None:
    with pytest.raises(KlutchError) as raised:
        from_repository_binding(binding(pollIntervall="1s"))
    assert raised.value.message.startswith("RepositoryBinding cluster-abc/orders: ")
    assert "spec.pollIntervall: unknown field — did you mean pollInterval?" in raised.value.message


def test_a_binding_accepts_what_the_crd_accepts() -> None:
    spec = from_repository_binding(binding(pollInterval="1m30s", suspend=True))
    assert (spec.poll_interval, spec.suspend) == (90.0, True)


def test_bind_api_defaults_and_an_empty_browser(tmp_path: Path) -> None:
    config = parse_bind_api_config(BIND_API + "browser: {}\n", "b.yaml", tmp_path)
    assert config.browser is None
    assert (config.listen, config.consumer_prefix, config.bindings_per_identity) == (
        "127.0.0.1:8443",
        "cluster",
        50,
    )


@pytest.mark.parametrize("model", [ReconcilerConfig, BindApiConfig, RepositoryBindingSpec])
def test_every_field_is_described(model: type[BaseModel]) -> None:
    """The descriptions become the schemas' and the CRD's documentation (kubectl explain)."""
    undescribed = [
        f"{each.__name__}.{name}"
        for each in reachable(model)
        for name, field in each.model_fields.items()
        if not field.description or "\n" in field.description
    ]
    assert undescribed == []
