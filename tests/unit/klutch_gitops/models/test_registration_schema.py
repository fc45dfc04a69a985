"""One registration schema: a config file's repository entry and a RepositoryBinding's spec narrow
one base (``models.registration``), go through one builder, and follow one name rule."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

from klutch_gitops.config_file import parse_config
from klutch_gitops.errors import KlutchError
from klutch_gitops.models import schemas
from klutch_gitops.models.binding import RepositoryBindingSpec, TenantWriteBack
from klutch_gitops.models.reconciler import ReconcilerConfig, Repository, WriteBack
from klutch_gitops.models.registration import (
    REGISTRATION_NAME_PATTERN,
    RegistrationFields,
    WriteBackFields,
    registration_name,
)
from klutch_gitops.repository_config import from_repository_binding

NARROWED = {"url"}  # each narrowing model says which URLs it takes


@pytest.mark.parametrize(
    ("base", "models"),
    [
        (RegistrationFields, (Repository, RepositoryBindingSpec)),
        (WriteBackFields, (WriteBack, TenantWriteBack)),
    ],
)
def test_both_models_take_every_common_field_from_the_base(
    base: type[BaseModel], models: tuple[type[BaseModel], ...]
) -> None:
    common = base.model_fields
    for model in models:
        fields = model.model_fields
        assert list(fields)[: len(common)] == list(common)  # in the base's order, first
        for name, field in common.items():
            if name in NARROWED:
                continue
            assert fields[name].description == field.description, (model, name)
            assert fields[name].default == field.default, (model, name)


def test_a_field_of_the_base_shows_in_the_crd_and_the_config_schema() -> None:
    crd = schemas.crd_spec_schema()["properties"]
    config = schemas.json_schema(ReconcilerConfig, "x")["definitions"]["Repository"]["properties"]
    for name, field in RegistrationFields.model_fields.items():
        alias = field.alias or to_camel(name)
        assert alias in crd, alias
        assert alias in config, alias
        if name not in NARROWED:
            assert crd[alias].get("default") == config[alias].get("default"), alias


def test_one_loop_check_and_wording_for_both(tmp_path: Path) -> None:
    loop = {"mode": "branch", "branch": "release"}  # the followed branch
    config = CONFIG.replace("      mode: inline\n", "      mode: branch\n      branch: release\n")
    wording = "writeBack.branch must differ from branch, or status commits would loop"
    with pytest.raises(KlutchError, match=wording):
        parse_config(config, "c.yaml", tmp_path)
    with pytest.raises(KlutchError, match=wording):
        from_repository_binding({**BINDING, "spec": {**BINDING["spec"], "writeBack": loop}})


CONFIG = """\
controlPlane: {kubeconfig: admin.kubeconfig}
repositories:
  - name: cluster-abc.orders
    url: https://git.example/team/orders.git
    branch: release
    path: claims
    consumerNamespace: cluster-abc
    appNamespaces: [orders, payments]
    appCluster:
      kubeconfigSecretRef: {namespace: cluster-abc, name: app}
    controlPlane:
      kubeconfigSecretRef: {namespace: cluster-abc, name: binder, key: config}
    credentials:
      secretRef: {namespace: cluster-abc, name: git}
    webhookSecret:
      secretRef: {namespace: cluster-abc, name: hooks, key: token}
    forgeToken:
      secretRef: {namespace: cluster-abc, name: forge, key: api}
    writeBack:
      mode: inline
      author: {name: Team, email: team@example.com}
    pollInterval: 1m30s
    suspend: true
    appSync: external
"""
BINDING: dict[str, Any] = {
    "metadata": {"namespace": "cluster-abc", "name": "orders"},
    "spec": {
        "url": "https://git.example/team/orders.git",
        "branch": "release",
        "path": "claims",
        "appNamespaces": ["orders", "payments"],
        "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
        "controlPlane": {"kubeconfigSecretRef": {"name": "binder", "key": "config"}},
        "credentialsSecretRef": {"name": "git"},
        "webhookSecretRef": {"name": "hooks"},
        "forgeTokenSecretRef": {"name": "forge", "key": "api"},
        "writeBack": {"mode": "inline", "author": {"name": "Team", "email": "team@example.com"}},
        "pollInterval": "1m30s",
        "suspend": True,
        "appSync": "external",
    },
}


def test_one_builder_gives_an_equivalent_entry_and_binding_the_same_spec(tmp_path: Path) -> None:
    [entry] = parse_config(CONFIG, "c.yaml", tmp_path).repositories
    assert from_repository_binding(BINDING) == entry


@pytest.mark.parametrize(
    ("namespace", "name"),
    [
        ("cluster-abc", "orders"),
        ("c" * 63, "x"),
        ("cluster-abc", "a" * 50 + ".-b"),  # cut at 63, then no trailing '.' or '-'
        ("cluster-a", "team.prod"),
    ],
)
def test_a_binding_s_registration_name_follows_the_config_entries_rule(
    namespace: str, name: str
) -> None:
    found = registration_name({"namespace": namespace, "name": name})
    assert re.match(REGISTRATION_NAME_PATTERN, found), found
