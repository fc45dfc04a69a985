"""Hostile webhooks against two sharded reconciler replicas on the real Control Plane.

Every replica takes webhooks and reads every registration (``reconciler/ha/shards.py``): a request
that reaches a replica for another replica's repository used to make it resolve that
registration's whole binding (kubeconfigs, Git credentials, forge token) before the signature was
checked — anyone naming a URL could have any replica load any tenant's credentials. Now an
unverified request only reads the named registrations' webhook secrets, and a push signed with one
tenant's secret stamps only that tenant's shard.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from klutch_gitops.config import LeaderElection, SecretRef
from klutch_gitops.config_file import config_from, defaults
from klutch_gitops.dev.localstack.processes import free_port
from klutch_gitops.dev.localstack.stack import StackInfo
from klutch_gitops.kube.resources import LEASES
from reconciler.ha.shards import FETCH_ANNOTATION, shard_lease, shard_of
from reconciler.manager import Reconciler
from tests.conftest import TwinNamespace
from tests.kit.tenant import Tenant, make_tenant
from tests.kit.wait import eventually

SHARDS = 8
SECRETS = {"a": b"tenant-a-webhook-secret", "b": b"tenant-b-webhook-secret"}


@dataclass
class Fleet:
    tenants: dict[str, Tenant]
    replicas: dict[str, Reconciler]
    election: LeaderElection

    def name(self, who: str) -> str:
        return self.tenants[who].config.repositories[0].name

    def owner(self, who: str) -> str | None:
        owners = [n for n, r in self.replicas.items() if self.name(who) in r.syncs]
        return owners[0] if len(owners) == 1 else None

    def stamps(self, who: str) -> str:
        lease = self.tenants[who].control_plane.get(
            LEASES,
            self.election.namespace,
            shard_lease(self.election.name, shard_of(self.name(who), SHARDS)),
        )
        return ((lease or {}).get("metadata", {}).get("annotations") or {}).get(
            FETCH_ANNOTATION, ""
        )


@pytest.fixture
def fleet(
    stack: StackInfo,
    clusters: dict[str, client.ApiClient],
    namespace: TwinNamespace,
    tmp_path: Path,
) -> Iterator[Fleet]:
    tenants, specs = {}, []
    for who, secret in SECRETS.items():
        home = tmp_path / who
        home.mkdir()
        tenants[who] = make_tenant(stack, clusters, home, start=False)
        (home / "own-webhook").write_bytes(secret)
        spec = tenants[who].config.repositories[0]
        specs.append(replace(spec, webhook_secret=SecretRef(file=home / "own-webhook")))
    election = replace(
        defaults().leader_election,
        enabled=True,
        namespace=namespace.name,
        name=f"hooks-{uuid.uuid4().hex[:6]}",
        lease_duration=3.0,
        renew_deadline=2.0,
        retry_period=0.2,
        shards=SHARDS,
    )
    replicas = {}
    for name in ("r1", "r2"):
        config = config_from(
            Path(stack.clusters["control-plane"].kubeconfig),
            repositories=tuple(specs),
            listen=f"127.0.0.1:{free_port()}",
            poll_interval=3600.0,
            batch_window=0.3,
            workers=2,
            work_dir=tmp_path / name,
            leader_election=election,
        )
        replicas[name] = Reconciler(config, identity=name, exit_process=lambda _code: None)
        replicas[name].start()
    found = Fleet(tenants, replicas, election)
    eventually(lambda: found.owner("a") and found.owner("b"), "each repository on one replica", 60)
    yield found
    for replica in replicas.values():
        replica.stop()


def push(fleet: Fleet, replica: str, secret: bytes) -> httpx.Response:
    """A push naming A's and B's repositories, sent to ``replica``."""
    a, b = fleet.tenants["a"], fleet.tenants["b"]
    body = json.dumps(
        {
            "ref": "refs/heads/main",
            "after": "1" * 40,
            "repository": {"clone_url": f"file://{a.remote}", "ssh_url": f"file://{b.remote}"},
        }
    ).encode()
    headers = {
        "X-Gitea-Event": "push",
        "X-Gitea-Delivery": str(uuid.uuid4()),
        "X-Gitea-Signature": hmac.new(secret, body, hashlib.sha256).hexdigest(),
    }
    url = f"http://{fleet.replicas[replica].config.listen}/webhooks/gitea"
    return httpx.post(url, content=body, headers=headers, timeout=30)


def test_an_unverified_request_resolves_no_other_replicas_binding(fleet: Fleet) -> None:
    b_owner = fleet.owner("b")
    visited = next(name for name in fleet.replicas if name != b_owner)
    replica = fleet.replicas[visited]

    forged = push(fleet, visited, b"guessed")
    assert fleet.name("b") not in replica.visitors  # no kubeconfig, credential or token loaded
    assert (forged.status_code, forged.json()) == (
        401,
        {
            "error": "X-Gitea-Signature matches the webhook secret of no registration of this "
            "repository"
        },
    )
    assert fleet.stamps("b") == ""


def test_a_push_signed_by_a_stamps_only_as_shard(fleet: Fleet) -> None:
    b_owner = fleet.owner("b")
    visited = next(name for name in fleet.replicas if name != b_owner)
    response = push(fleet, visited, SECRETS["a"])
    assert (response.status_code, response.json()) == (202, {"triggered": 1})
    assert fleet.name("b") not in fleet.replicas[visited].visitors
    if shard_of(fleet.name("a"), SHARDS) != shard_of(fleet.name("b"), SHARDS):
        assert fleet.stamps("b") == ""  # B's holder was asked for nothing
    a_stamped = fleet.stamps("a")
    assert (visited in a_stamped) == (fleet.owner("a") != visited)
