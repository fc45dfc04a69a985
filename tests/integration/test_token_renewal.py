"""Binder token renewal against the real Control Plane: a short token is renewed before it
expires, the binding that uses it switches to the new one, and a broken Secret is reported and
skipped while the others are renewed."""

from __future__ import annotations

import base64
import logging
import uuid
from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client

from bind_api.bindings import BINDER_SECRET, bind, secret, unbind
from klutch_gitops.apis import (
    API_SERVICE_EXPORTS,
    API_SERVICE_NAMESPACES,
    BINDER,
    BINDER_KUBECONFIG_LABEL,
)
from klutch_gitops.config import TokenRenewal
from klutch_gitops.consumer import FIELD_MANAGER, binder_kubeconfig
from klutch_gitops.kube.client import Kube, KubeError, api_client
from klutch_gitops.kube.crds import install_crds, load_crds, load_dev_claim_crds
from klutch_gitops.kube.resources import EVENTS, NAMESPACES, SECRETS, SERVICE_ACCOUNTS
from reconciler.controllers.tokens import INVALID_REASON, TokenRenewer, TokenTimes, token_times
from reconciler.manager import Reconciler
from tests.env import Env
from tests.kit.claims import POSTGRES, claim
from tests.kit.git import git
from tests.kit.wait import eventually

from .test_bindings import POSTGRES_API, bind_repository, request
from .test_reconciler_modes import TEMPLATES

# The shortest token the TokenRequest API issues is due at once with this threshold; a renewed
# one (an hour) is not, so each Secret is renewed exactly once here.
SETTINGS = TokenRenewal(lifetime=3600.0, renew_before=1200.0)
LABELS = {BINDER_KUBECONFIG_LABEL: "true"}


@pytest.fixture
def admin(clusters: dict[str, client.ApiClient]) -> Kube:
    install_crds(
        clusters["control-plane"], load_crds(cluster="control-plane") + load_dev_claim_crds()
    )
    return Kube(clusters["control-plane"])


@pytest.fixture
def offered(admin: Kube) -> Iterator[str]:
    """A namespace with a PostgreSQL template, to bind against."""
    namespace = f"templates-{uuid.uuid4().hex[:6]}"
    admin.create(NAMESPACES, {"metadata": {"name": namespace}})
    admin.create(
        TEMPLATES["example-backend"],
        {
            "apiVersion": TEMPLATES["example-backend"].api_version,
            "kind": "APIServiceExportTemplate",
            "metadata": {"name": "postgresqlinstances", "namespace": namespace},
            "spec": {
                "APIServiceSelector": {"group": "anynines.com", "resource": "postgresqlinstances"}
            },
        },
    )
    yield namespace
    admin.delete(NAMESPACES, None, namespace)


def kubeconfig_in(admin: Kube, namespace: str) -> str:
    data = admin.get(SECRETS, namespace, BINDER_SECRET)["data"]["kubeconfig"]
    return base64.b64decode(data).decode()


def token_in(admin: Kube, namespace: str) -> str:
    return yaml.safe_load(kubeconfig_in(admin, namespace))["users"][0]["user"]["token"]


def write_binder_secret(
    admin: Kube, namespace: str, kubeconfig: str, labels: dict[str, str] = LABELS
) -> None:
    """What bind writes, with a kubeconfig of the test's choice."""
    admin.apply(
        SECRETS,
        secret(namespace, BINDER_SECRET, {"kubeconfig": kubeconfig}, labels),
        field_manager=FIELD_MANAGER,
        force=True,
    )


def assert_renewed(admin: Kube, namespace: str, old: str) -> TokenTimes:
    """The Secret holds a later token that works against the Control Plane."""
    new = token_in(admin, namespace)
    assert new != old
    times = token_times(new)
    assert times.expires > token_times(old).expires
    assert times.expires - times.issued == SETTINGS.lifetime
    as_binder = Kube(api_client(kubeconfig_in(admin, namespace)))
    assert [e["metadata"]["name"] for e in as_binder.list(API_SERVICE_EXPORTS, namespace)[0]] == [
        POSTGRES_API
    ]
    return times


def rejected(kubeconfig: dict, namespace: str) -> bool:
    try:
        Kube(api_client(kubeconfig)).list(API_SERVICE_EXPORTS, namespace)
    except KubeError as error:
        return error.status == 401
    return False


def test_the_reconciler_renews_a_binding_token_and_the_binding_switches_to_it(
    admin: Kube, offered: str, env: Env
) -> None:
    app = Kube(env.clusters["app"])
    team, result = bind_repository(admin, offered, env.stack, app, env.tmp_path, env.git_server)
    consumer = result.consumer_namespace
    labels = admin.get(SECRETS, consumer, BINDER_SECRET)["metadata"]["labels"]
    assert labels[BINDER_KUBECONFIG_LABEL] == "true"
    # A short token for a ServiceAccount that is then replaced: the token is due, and no
    # longer accepted, so the binding can only work once it uses the renewed token. Unlabelled
    # at first, so the binding starts with it before the renewer sees it.
    stale = binder_kubeconfig(admin, consumer, 600)
    stale_text = yaml.safe_dump(stale, sort_keys=False)
    write_binder_secret(admin, consumer, stale_text, labels={})
    admin.delete(SERVICE_ACCOUNTS, consumer, BINDER)
    eventually(lambda: admin.get(SERVICE_ACCOUNTS, consumer, BINDER) is None, "the old identity")
    admin.apply(
        SERVICE_ACCOUNTS,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": BINDER, "namespace": consumer},
        },
        field_manager=FIELD_MANAGER,
    )
    old = stale["users"][0]["user"]["token"]
    eventually(lambda: rejected(stale, consumer), "the stale token to be refused")

    # One replica, no leader election, no shards: the registration restarts with the renewed
    # token only through the Reconciler's watch of the binder Secrets (the renewer reports to
    # no one), as it does in a replica that holds the shard while the leader renews.
    config = env.config(binder_tokens=SETTINGS)
    reconciler = Reconciler(config).start(serve_http=False)
    name = f"{consumer}.{result.repository_binding}"
    try:
        eventually(lambda: "401" in reconciler.errors.get(name, ""), "a pass with the stale token")
        write_binder_secret(admin, consumer, stale_text)
        eventually(lambda: token_in(admin, consumer) != old, "the renewed token")
        assert_renewed(admin, consumer, old)
        mapped = eventually(
            lambda: (
                (admin.get(API_SERVICE_NAMESPACES, consumer, team) or {})
                .get("status", {})
                .get("namespace")
            ),
            "the namespace mapping, made with the renewed token",
            timeout=60,
        )
        eventually(lambda: admin.get(POSTGRES, mapped, "orders"), "the claim on the Control Plane")
        clone = env.tmp_path / "human"
        (clone / "claims" / "billing.yaml").write_text(claim("billing", team))
        git(clone, "add", "-A")
        git(clone, "commit", "-q", "-m", "billing")
        git(clone, "pull", "-q", "--rebase", "origin", "main")  # past the status commits
        git(clone, "push", "-q", "origin", "main")
        eventually(lambda: admin.get(POSTGRES, mapped, "billing"), "a new claim after renewal")
    finally:
        try:
            unbind(admin, consumer)  # while the reconciler's namespace controller runs
        finally:
            reconciler.stop()
            app.delete(NAMESPACES, None, team)


def test_a_broken_binder_kubeconfig_is_reported_and_skipped_while_another_is_renewed(
    admin: Kube,
    offered: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = bind(admin, request(), template_namespace=offered).consumer_namespace
    broken = bind(admin, request(), template_namespace=offered).consumer_namespace
    old = yaml.safe_dump(binder_kubeconfig(admin, good, 600), sort_keys=False)
    write_binder_secret(admin, good, old)
    write_binder_secret(admin, broken, "this: is not a kubeconfig")
    broken_version = admin.get(SECRETS, broken, BINDER_SECRET)["metadata"]["resourceVersion"]
    old_token = yaml.safe_load(old)["users"][0]["user"]["token"]
    renewer = TokenRenewer(admin, SETTINGS)
    try:
        with caplog.at_level(logging.WARNING, logger="reconciler.controllers.tokens"):
            renewer.start()
            eventually(lambda: token_in(admin, good) != old_token, "the good Secret's renewal")
            assert_renewed(admin, good, old_token)
            [event] = eventually(
                lambda: [e for e in admin.list(EVENTS, broken)[0] if e["reason"] == INVALID_REASON],
                "the Warning Event on the broken Secret",
            )
        assert event["type"] == "Warning"
        assert event["involvedObject"]["kind"] == "Secret"
        assert event["involvedObject"]["name"] == BINDER_SECRET
        assert "no token for the current context's user" in event["message"]
        assert f"{broken}/{BINDER_SECRET} cannot be renewed" in caplog.text
        live = admin.get(SECRETS, broken, BINDER_SECRET)["metadata"]["resourceVersion"]
        assert live == broken_version
    finally:
        renewer.stop()
        unbind(admin, good)
        unbind(admin, broken)
