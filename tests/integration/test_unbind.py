"""Safe unbind: ``klutch-bind unbind`` lists what goes, needs --yes without a terminal, and the bind
API refuses deletion-protected claims unless forced — on a real bind API, Dex and Control Plane."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from bind_api.server import build_server
from bind_api.unbinding import DELETION_PROTECTION
from klutch_gitops.apis import API_SERVICE_NAMESPACES
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.client import Kube
from klutch_gitops.kube.resources import NAMESPACES
from reconciler.controllers.namespaces import NamespaceController
from tests.kit.claims import POSTGRES, claim
from tests.kit.wait import eventually

from .bindapi import (
    API,
    CLI,
    bind_api_config,
    cli,
    dev_id_token,
    offered_api,
    serving,
    token_args,
)


@pytest.fixture(scope="module")
def id_token(stack: StackInfo) -> str:
    return dev_id_token(stack)


@pytest.fixture(scope="module")
def bind_url(stack: StackInfo, clusters) -> Iterator[str]:
    """The bind API in the background, an offered API, and the controller whose finalizer on
    each APIServiceNamespace deletes the mapped namespace when the consumer namespace goes."""
    controller = NamespaceController(Kube(clusters["control-plane"])).start()
    try:
        with offered_api(clusters), serving(build_server(bind_api_config(stack))) as url:
            yield url
    finally:
        controller.stop()


def bound_with_a_database(
    url: str, token: str, admin: Kube, *, protected: bool
) -> tuple[str, str, str]:
    """A binding (through the API) with one mapped namespace holding the claim ``orders``;
    returns the consumer namespace, the mapped namespace and the claim's name."""
    headers = {"Authorization": f"Bearer {token}"}
    body = {"clusterId": f"unbind-{uuid.uuid4().hex[:6]}", "apis": [API]}
    response = httpx.post(f"{url}/api/v1/bindings", json=body, headers=headers, timeout=120)
    assert response.status_code == 201, response.text
    consumer = response.json()["consumerNamespace"]
    admin.create(
        API_SERVICE_NAMESPACES,
        {
            "apiVersion": API_SERVICE_NAMESPACES.api_version,
            "kind": "APIServiceNamespace",
            "metadata": {"name": "shop", "namespace": consumer},
        },
    )
    mapped = eventually(
        lambda: (
            (admin.get(API_SERVICE_NAMESPACES, consumer, "shop") or {})
            .get("status", {})
            .get("namespace")
        ),
        "the mapped namespace",
    )
    document = yaml.safe_load(claim("orders", mapped))
    if protected:
        document["metadata"]["annotations"] = {DELETION_PROTECTION: "true"}
    admin.create(POSTGRES, document)
    return consumer, mapped, "orders"


def still_there(admin: Kube, consumer: str, mapped: str, name: str) -> bool:
    namespace = admin.get(NAMESPACES, None, consumer)
    return bool(
        namespace
        and not namespace["metadata"].get("deletionTimestamp")
        and admin.get(POSTGRES, mapped, name)
    )


def test_without_yes_and_no_terminal_nothing_is_deleted(
    bind_url: str, id_token: str, clusters, tmp_path: Path
) -> None:
    admin = Kube(clusters["control-plane"])
    consumer, mapped, name = bound_with_a_database(bind_url, id_token, admin, protected=False)
    try:
        refused = cli(
            tmp_path, "unbind", bind_url, consumer, *token_args(tmp_path, id_token)
        )  # stdin: null

        assert refused.returncode == 1
        assert "Traceback" not in refused.stderr
        last = refused.stderr.strip().splitlines()[-1]
        assert "pass --yes" in last
        assert "nothing was deleted" in last
        # the listing: both namespaces, and the claim as a database
        assert f"namespace {consumer} (consumer namespace)" in refused.stderr
        assert f"namespace {mapped} (mapped namespace)" in refused.stderr
        assert f"PostgresqlInstance {mapped}/{name} [database]" in refused.stderr
        assert "1 claim(s), 1 database(s), 0 deletion-protected" in refused.stderr
        assert still_there(admin, consumer, mapped, name)
    finally:
        cli(tmp_path, "unbind", bind_url, consumer, "--yes", *token_args(tmp_path, id_token))


def on_a_terminal(tmp_path: Path, answer: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``klutch-bind ARGS`` with a pseudo-terminal as stdin, answering the prompt ``answer``."""
    controller, terminal = os.openpty()
    try:
        environment = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config")}
        with subprocess.Popen(
            [*CLI, *args], stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=environment,
        ) as child:  # fmt: skip
            os.write(controller, f"{answer}\n".encode())
            stdout, stderr = child.communicate(timeout=240)
        return subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr)
    finally:
        os.close(controller)
        os.close(terminal)


def test_on_a_terminal_it_asks_and_deletes_only_on_yes(
    bind_url: str, id_token: str, clusters, tmp_path: Path
) -> None:
    admin = Kube(clusters["control-plane"])
    consumer, mapped, name = bound_with_a_database(bind_url, id_token, admin, protected=False)
    args = ("unbind", bind_url, consumer, *token_args(tmp_path, id_token))

    declined = on_a_terminal(tmp_path, "n", *args)
    assert declined.returncode == 1
    assert f"Delete all of this ({consumer})?" in declined.stderr
    assert "not confirmed; nothing was deleted" in declined.stderr.splitlines()[-1]
    assert still_there(admin, consumer, mapped, name)

    accepted = on_a_terminal(tmp_path, "y", *args)
    assert accepted.returncode == 0, accepted.stderr
    assert f"unbound {consumer}" in accepted.stdout
    assert admin.get(NAMESPACES, None, consumer) is None
    assert admin.get(NAMESPACES, None, mapped) is None


def test_a_protected_claim_is_refused_by_the_bind_api_until_forced(
    bind_url: str, id_token: str, clusters, tmp_path: Path
) -> None:
    admin = Kube(clusters["control-plane"])
    consumer, mapped, name = bound_with_a_database(bind_url, id_token, admin, protected=True)
    common = [*token_args(tmp_path, id_token)]

    refused = cli(tmp_path, "unbind", bind_url, consumer, "--yes", *common)
    assert refused.returncode == 1
    assert "Traceback" not in refused.stderr
    assert "[database, deletion-protected]" in refused.stderr
    assert f"PostgresqlInstance {mapped}/{name}" in refused.stderr.splitlines()[-2]
    assert "--force" in refused.stderr.splitlines()[-1]
    assert still_there(admin, consumer, mapped, name)

    # The server enforces it, whatever the client: a plain DELETE is a 409 naming the claim.
    direct = httpx.delete(
        f"{bind_url}/api/v1/bindings/{consumer}",
        headers={"Authorization": f"Bearer {id_token}"},
        timeout=60,
    )
    assert direct.status_code == 409, direct.text
    assert f"{mapped}/{name}" in direct.json()["error"]
    assert "force=true" in direct.json()["fix"]
    assert still_there(admin, consumer, mapped, name)

    # Without --yes the CLI refuses before asking, naming --force.
    unasked = cli(tmp_path, "unbind", bind_url, consumer, *common)
    assert unasked.returncode == 1
    assert "--force" in unasked.stderr
    assert still_there(admin, consumer, mapped, name)

    forced = cli(tmp_path, "unbind", bind_url, consumer, "--yes", "--force", "-o", "json", *common)
    assert forced.returncode == 0, forced.stderr
    report = json.loads(forced.stdout)
    assert report["deleted"]["namespaces"] == [consumer, mapped]
    assert [(c["name"], c["protected"]) for c in report["deleted"]["claims"]] == [(name, True)]
    assert "remaining: 2 namespace(s)" in forced.stderr  # progress while it goes
    assert "nothing of the binding remains" in forced.stderr.splitlines()[-1]
    # it waited: nothing is left when it returns
    assert admin.get(NAMESPACES, None, consumer) is None
    assert admin.get(NAMESPACES, None, mapped) is None


def test_an_unfinished_unbind_prints_what_remains(
    bind_url: str, id_token: str, clusters, tmp_path: Path
) -> None:
    admin = Kube(clusters["control-plane"])
    consumer, mapped, name = bound_with_a_database(bind_url, id_token, admin, protected=False)
    # A finalizer nobody removes holds the claim, so the mapped namespace cannot go yet.
    admin.patch(POSTGRES, mapped, name, {"metadata": {"finalizers": ["example.com/hold"]}})
    try:
        slow = cli(
            tmp_path,
            "unbind",
            bind_url,
            consumer,
            "--yes",
            "--timeout",
            "3",
            *token_args(tmp_path, id_token),
        )
        assert slow.returncode == 1
        assert "Traceback" not in slow.stderr
        assert f"unbinding {consumer} did not finish in 3s" in slow.stderr
        assert mapped in slow.stderr.splitlines()[-2]
    finally:
        admin.patch(POSTGRES, mapped, name, {"metadata": {"finalizers": None}})
    eventually(lambda: admin.get(NAMESPACES, None, consumer) is None, "the consumer to go", 120)
