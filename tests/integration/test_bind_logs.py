"""The bind API's logs during a bind and unbind with a repository: JSON lines that name the
binding and never carry a token, a password or a private key."""

from __future__ import annotations

import base64
import io
import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bind_api.server import build_server
from klutch_gitops.bind.client import BindClient
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import NAMESPACES
from klutch_gitops.logs import JsonFormatter
from klutch_gitops.oidc_client import unverified_claims
from tests.kit.wait import eventually

from .bindapi import API, bind_api_config, dev_id_token, offered_api, serving

UVICORN = ("uvicorn", "uvicorn.error", "uvicorn.asgi")


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Every record of this process at DEBUG, as the product's JSON formatter writes it."""
    buffer = io.StringIO()
    handler = logging.StreamHandler(buffer)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    saved = root.level, {name: logging.getLogger(name).level for name in UVICORN}
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    yield buffer
    root.removeHandler(handler)
    root.setLevel(saved[0])
    for name, level in saved[1].items():
        logging.getLogger(name).setLevel(level)


def secrets_of(kubeconfig: str) -> list[str]:
    """The credentials in a kubeconfig: a token, or a client key (base64 and PEM body)."""
    user = yaml.safe_load(kubeconfig)["users"][0]["user"]
    found = [user[key] for key in ("token", "client-key-data") if user.get(key)]
    if "client-key-data" in user:
        pem = base64.b64decode(user["client-key-data"]).decode()
        found += [line for line in pem.splitlines() if line and not line.startswith("-----")]
    assert found, "the kubeconfig holds no credential to look for"
    return found


def test_bind_and_unbind_log_json_lines_without_credentials(
    json_log: io.StringIO, stack: StackInfo, clusters, tmp_path: Path
) -> None:
    id_token = dev_id_token(stack)
    app_kubeconfig = Path(stack.clusters["app"].kubeconfig).read_text()
    git_password = f"git-pw-{uuid.uuid4().hex}"
    repository = {
        "url": "https://git.example.com/team.git",  # tenants get https and ssh only
        "path": "claims",
        "appNamespaces": ["team"],
        "username": "bot",
        "password": git_password,
    }
    server = build_server(bind_api_config(stack))
    for name in UVICORN:  # the server set them to warning; what would it say at debug?
        logging.getLogger(name).setLevel(logging.DEBUG)
    with offered_api(clusters, "a-bindlogs"), serving(server) as url:
        header, payload, _ = id_token.split(".")
        with BindClient(url, f"{header}.{payload}.forged") as forged, pytest.raises(KlutchError):
            forged.exports()
        with BindClient(url, id_token) as api:
            invalid = {**repository, "appNamespaces": []}
            with pytest.raises(KlutchError, match="appNamespaces"):  # 422, the password inside
                api.bind({"clusterId": "logs", "apis": [API], "repository": invalid})
            with pytest.raises(KlutchError, match="App Cluster kubeconfig"):  # 400
                api.bind({"clusterId": "logs", "apis": [API], "repository": repository})
            result = api.bind(
                {
                    "clusterId": f"logs-{uuid.uuid4().hex[:6]}",
                    "apis": [API],
                    "repository": repository,
                    "appKubeconfig": app_kubeconfig,
                }
            )
            consumer = result["consumerNamespace"]
            assert result["repositoryBinding"]
            assert any(b["consumerNamespace"] == consumer for b in api.bindings())
            api.unbind(consumer)  # answers 202; the namespaces go meanwhile
            eventually(lambda: api.unbind_plan(consumer) is None, "the unbind to finish", 120)
    assert Kube(clusters["control-plane"]).get(NAMESPACES, None, consumer) is None

    text = json_log.getvalue()
    entries = [json.loads(line) for line in text.splitlines()]  # every line is one JSON object
    assert all({"time", "level", "logger", "message"} <= entry.keys() for entry in entries)
    assert any(entry["logger"].startswith("uvicorn") for entry in entries), "uvicorn not in JSON"
    subject = unverified_claims(id_token)["sub"]
    named = {
        entry["message"]
        for entry in entries
        if entry.get("subject") == subject and entry.get("consumer") == consumer
    }
    assert named == {"bound", "unbound"}, "the binding and the unbinding are not both logged"
    (bound,) = [e for e in entries if e["message"] == "bound" and e.get("consumer") == consumer]
    assert bound["repositoryBinding"] == result["repositoryBinding"]
    secrets = {
        "the bearer ID token": [id_token, payload],
        "the binder kubeconfig's token": secrets_of(result["kubeconfig"]),
        "the Git password": [git_password],
        "the App kubeconfig's client key": secrets_of(app_kubeconfig),
    }
    for what, values in secrets.items():
        assert not any(value in text for value in values), f"{what} is in the log"
