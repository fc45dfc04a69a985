"""Shared informers (klutch_gitops/kube/shared.py): routing by our repository label, reference
counting, and the identities that decide what may be shared (reconciler/sync/connection.py).

The fake cluster answers ``list`` and ``watch`` the way the API server's list and watch do for a
label selector ``key`` (exists): the objects carrying the label, then the events from a queue."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from klutch_gitops.config import SecretRef
from klutch_gitops.kube.client import Kube, Resource
from klutch_gitops.kube.informer import LAST_APPLIED, slim, slim_copy
from klutch_gitops.kube.resources import SECRETS
from klutch_gitops.kube.shared import Caches, Route
from reconciler.sync.connection import SHARED_POOL_CONNECTIONS, Resolver
from tests.kit.wait import eventually

LABEL = "gitops.klutch.anynines.com/repository"
CLAIMS = Resource("anynines.com", "v1", "postgresqlinstances", "PostgresqlInstance")


def claim(namespace: str, name: str, repository: str | None, version: str = "1") -> dict:
    labels = {LABEL: repository} if repository else {}
    return {
        "apiVersion": "anynines.com/v1",
        "kind": "PostgresqlInstance",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "resourceVersion": version,
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "managedFields": [
                {"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:x": {}}}
            ],
        },
        "spec": {"size": "small"},
    }


class FakeCluster(Kube):
    """One cluster's objects; counts the lists and watches (one per informer)."""

    def __init__(self, objects: list[dict], identity: str = "one") -> None:
        super().__init__(None, identity=identity)  # type: ignore[arg-type]
        self.objects = objects
        self.events: queue.Queue[tuple[str, dict]] = queue.Queue()
        self.watches = 0
        self.lock = threading.Lock()

    def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        *,
        limit: int | None = None,
        each: Callable[[dict], dict] | None = None,
    ) -> tuple[list[dict], str]:
        assert label_selector in (None, LABEL)
        found = [o for o in self.objects if not label_selector or LABEL in o["metadata"]["labels"]]
        copies = [dict(o, metadata=dict(o["metadata"])) for o in found]
        return [each(o) for o in copies] if each else copies, "1"

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        resource_version: str,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> Iterator[tuple[str, dict]]:
        with self.lock:
            self.watches += 1
        while True:
            try:
                yield self.events.get(timeout=0.05)
            except queue.Empty:
                continue


def recorder() -> tuple[list[tuple[str, str]], object]:
    seen: list[tuple[str, str]] = []

    def handler(event: str, obj: dict) -> None:
        seen.append((event, obj["metadata"]["name"]))

    return seen, handler


def test_one_informer_routes_each_object_to_its_repository() -> None:
    cluster = FakeCluster([claim("team-a", "a1", "a"), claim("team-b", "b1", "b")])
    caches = Caches()
    seen_a, to_a = recorder()
    seen_b, to_b = recorder()
    a = caches.subscribe(cluster, CLAIMS, to_a, route=Route(LABEL, "a"), transform=slim)
    b = caches.subscribe(cluster, CLAIMS, to_b, route=Route(LABEL, "b"), transform=slim)
    eventually(lambda: a.synced.is_set() and cluster.watches == 1, "the cache")
    assert len(caches.informers()) == 1
    eventually(lambda: [o["metadata"]["name"] for o in a.items()] == ["a1"], "the cache")
    assert [o["metadata"]["name"] for o in b.items()] == ["b1"]
    assert a.get("team-b", "b1") is None
    assert b.get("team-b", "b1") is not None
    assert ("ADDED", "b1") not in seen_a

    cluster.events.put(("ADDED", claim("team-a", "a2", "a", "2")))
    eventually(lambda: a.get("team-a", "a2") is not None, "the cache")
    assert ("ADDED", "a2") in seen_a
    assert ("ADDED", "a2") not in seen_b

    # the label moves a1 to b: a loses it (and hears so), b gains it
    cluster.events.put(("MODIFIED", claim("team-a", "a1", "b", "3")))
    eventually(lambda: b.get("team-a", "a1") is not None, "the cache")
    assert a.get("team-a", "a1") is None
    assert seen_a.count(("MODIFIED", "a1")) == 1
    assert ("MODIFIED", "a1") in seen_b


def test_the_last_subscriber_stops_the_informer_and_the_other_keeps_working() -> None:
    cluster = FakeCluster([claim("team-a", "a1", "a"), claim("team-b", "b1", "b")])
    caches = Caches()
    a = caches.subscribe(cluster, CLAIMS, lambda e, o: None, route=Route(LABEL, "a"))
    b = caches.subscribe(cluster, CLAIMS, lambda e, o: None, route=Route(LABEL, "b"))
    eventually(lambda: b.synced.is_set(), "the cache")
    informer = caches.informers()[0]
    a.stop()
    a.stop()  # twice is once
    cluster.events.put(("ADDED", claim("team-b", "b2", "b", "2")))
    eventually(lambda: b.get("team-b", "b2") is not None, "the cache")
    assert caches.informers() == [informer]
    b.stop()
    assert caches.informers() == []
    again = caches.subscribe(cluster, CLAIMS, lambda e, o: None, route=Route(LABEL, "b"))
    assert caches.informers() != [informer]  # a fresh informer, not the stopped one
    again.stop()


def test_identities_namespaces_and_selectors_are_never_shared() -> None:
    """Tenant B's registration naming tenant A's namespace gets an informer with B's identity,
    never A's cache."""
    caches = Caches()
    tenant_a, tenant_b = FakeCluster([], "tenant-a"), FakeCluster([], "tenant-b")
    caches.subscribe(tenant_a, SECRETS, lambda e, o: None, namespace="ns-a")
    caches.subscribe(tenant_b, SECRETS, lambda e, o: None, namespace="ns-a")
    caches.subscribe(tenant_a, SECRETS, lambda e, o: None, namespace="ns-b")
    caches.subscribe(tenant_a, SECRETS, lambda e, o: None, namespace="ns-a")  # shares the first
    caches.subscribe(tenant_a, CLAIMS, lambda e, o: None)  # unlabelled: external registrations
    caches.subscribe(tenant_a, CLAIMS, lambda e, o: None, route=Route(LABEL, "a"))
    informers = caches.informers()
    assert len(informers) == 5
    assert {(i.kube.identity, i.namespace) for i in informers if i.resource == SECRETS} == {
        ("tenant-a", "ns-a"),
        ("tenant-b", "ns-a"),
        ("tenant-a", "ns-b"),
    }


def test_the_cache_keeps_what_decisions_read() -> None:
    obj = claim("team-a", "a1", "a")
    obj["metadata"]["annotations"] = {LAST_APPLIED: "{}", "keep": "me"}
    obj["metadata"]["deletionTimestamp"] = "2026-01-02T00:00:00Z"
    obj["status"] = {"conditions": [{"type": "Ready", "status": "True"}]}
    kept = slim(obj)
    assert kept["metadata"]["managedFields"] == [{"manager": "kubectl", "operation": "Apply"}]
    assert "creationTimestamp" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {LAST_APPLIED: "{}", "keep": "me"}
    assert kept["spec"] == {"size": "small"}
    assert kept["status"] == obj["status"]
    assert kept["metadata"]["deletionTimestamp"] == "2026-01-02T00:00:00Z"
    assert slim_copy(claim("x", "y", None) | {"metadata": obj["metadata"]})["metadata"][
        "annotations"
    ] == {"keep": "me"}
    twin = slim(claim("team-a", "a2", "a"))
    assert twin["metadata"]["namespace"] is kept["metadata"]["namespace"]  # interned


def kubeconfig(path: Path, ca: str, token: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', "
        f"certificate-authority: {ca}}}}}]\n"
        f"users: [{{name: u, user: {{token: {token}}}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


def test_an_identity_changes_with_the_kubeconfig_and_its_certificates(tmp_path: Path) -> None:
    resolver = Resolver(admin=None, secrets_dir=tmp_path / "secrets")  # type: ignore[arg-type]
    (tmp_path / "ca.crt").write_text("CA ONE")
    ref = SecretRef(file=kubeconfig(tmp_path / "kubeconfig", "ca.crt", "t1"))
    first = resolver.identity(ref, None)
    assert first is not None
    assert first == resolver.identity(ref, None)
    (tmp_path / "ca.crt").write_text("CA TWO")  # a rotated certificate file
    rotated = resolver.identity(ref, None)
    kubeconfig(tmp_path / "kubeconfig", "ca.crt", "t2")  # a new token
    assert len({first, rotated, resolver.identity(ref, None)}) == 3
    (tmp_path / "ca.crt").unlink()
    assert resolver.identity(ref, None) is None  # unreadable: shared with nothing
    secret = SecretRef(env="X")
    assert resolver.identity(secret, b"a") != resolver.identity(secret, b"b")
    other = Resolver(admin=None, secrets_dir=tmp_path / "s2")  # type: ignore[arg-type]
    assert other.identity(secret, b"a") != resolver.identity(secret, b"a")  # keyed per process


def test_registrations_with_one_identity_get_one_client(tmp_path: Path) -> None:
    """The Resolver hands every registration with the same kubeconfig the same Kube, with a
    pool wide enough for all their writes; new content is a new Kube."""
    resolver = Resolver(admin=None, secrets_dir=tmp_path / "secrets")  # type: ignore[arg-type]
    (tmp_path / "ca.crt").write_text("CA ONE")
    ref = SecretRef(file=kubeconfig(tmp_path / "kubeconfig", "ca.crt", "t1"))
    first = resolver.kube(ref, "App kubeconfig", "consumer")
    assert resolver.kube(ref, "App kubeconfig", "consumer") is first
    pool = first.api.rest_client.pool_manager.connection_pool_kw
    assert pool["maxsize"] == SHARED_POOL_CONNECTIONS
    kubeconfig(tmp_path / "kubeconfig", "ca.crt", "t2")  # the registration restarts, new token
    second = resolver.kube(ref, "App kubeconfig", "consumer")
    assert second is not first
    assert second.identity != first.identity


class PagedCluster(Kube):
    """Answers a list the way the API server pages one: ``limit`` objects and a continue
    token, one resourceVersion for the snapshot (apiserver's storage pager)."""

    def __init__(self, objects: list[dict]) -> None:
        super().__init__(None, identity="paged")  # type: ignore[arg-type]
        self.objects = objects
        self.queries: list[dict[str, str]] = []

    def _call(self, method: str, path: str, **kwargs: object) -> dict:
        query = dict(kwargs["query"])  # type: ignore[arg-type]
        self.queries.append(query)
        start = int(query.get("continue", "0"))
        end = start + int(query["limit"])
        token = str(end) if end < len(self.objects) else ""
        page = [dict(o, metadata=dict(o["metadata"])) for o in self.objects[start:end]]
        return {"metadata": {"resourceVersion": "7", "continue": token}, "items": page}


def test_a_shared_relist_reads_pages_and_slims_each_before_the_next() -> None:
    cluster = PagedCluster([claim("team-a", f"a{i}", "a") for i in range(5)])
    slimmed: list[str] = []

    def each(obj: dict) -> dict:
        slimmed.append(obj["metadata"]["name"])
        return slim(obj)

    items, version = cluster.list(CLAIMS, None, LABEL, limit=2, each=each)
    assert version == "7"
    assert [o["metadata"]["name"] for o in items] == [f"a{i}" for i in range(5)]
    assert all("creationTimestamp" not in o["metadata"] for o in items)
    assert slimmed == [f"a{i}" for i in range(5)]
    assert [q.get("continue") for q in cluster.queries] == [None, "2", "4"]
    assert all(q["labelSelector"] == LABEL for q in cluster.queries)
