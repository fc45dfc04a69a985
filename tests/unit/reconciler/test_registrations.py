"""The set of registrations (reconciler/registrations.py) against in-memory fakes: added, updated
and removed RepositoryBindings, a refused spec, the platform, binder Secrets, and a status written
only when it changes."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from klutch_gitops.config import PlatformSpec, RegistrationSpec
from klutch_gitops.config_file import config_from, platform_from
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.conditions import by_type
from reconciler import metrics
from reconciler import registrations as module
from reconciler.manifests import Rejection
from reconciler.registration import ConfigEntry, Registration
from reconciler.registrations import PLATFORM, Registrations
from reconciler.server import create_app
from reconciler.sync.outcome import PassOutcome
from tests.kit.specs import registration_spec

HEAD = "b" * 40
NAME = "cluster-a.team"


class FakeKube:
    def __init__(self) -> None:
        self.statuses: list[dict] = []
        self.events: list[dict] = []

    def apply(self, _resource: Any, body: dict, **_options: Any) -> dict:
        self.statuses.append(body["status"])
        return body

    def create(self, _resource: Any, body: dict) -> dict:
        self.events.append(body)
        return body


class FakeQueue:
    def __init__(self) -> None:
        self.items: list[tuple[str, str]] = []

    def add(self, key: tuple[str, str]) -> None:
        self.items.append(key)

    def add_after(self, key: tuple[str, str], _delay: float) -> None:
        self.items.append(key)

    def __len__(self) -> int:
        return len(self.items)


@dataclass
class FakeConnection:
    spec: RegistrationSpec
    credentials: Any = None


class FakeResolver:
    def __init__(self) -> None:
        self.broken: dict[str, str] = {}  # registration -> why its Secrets cannot be used

    def connection(self, spec: RegistrationSpec) -> FakeConnection:
        if spec.name in self.broken:
            raise KlutchError(self.broken[spec.name], "fix the Secret")
        return FakeConnection(spec)

    def credentials(self, *_args: Any) -> None:
        return None

    def value(self, *_args: Any) -> bytes:
        return b"platform-secret"


@dataclass
class FakeSync:
    connection: FakeConnection
    head: str | None = None
    last_pass: PassOutcome | None = None
    pending: bool = True
    last_status_commit: str | None = None
    conflicts: dict = field(default_factory=dict)
    stopped: bool = False
    fetches: int = 0
    refusals: tuple[Rejection, ...] = ()
    fetch_error: str | None = None
    write_back_error: str | None = None  # write_back raises this
    passes: int = 0

    def sync(self) -> None:
        self.passes += 1
        self.head = HEAD
        self.last_pass = PassOutcome(HEAD, 1, self.refusals)
        self.pending = False

    def write_back(self) -> str | None:
        if self.write_back_error:
            raise KlutchError(self.write_back_error, "let the forge take pushes again")
        self.last_status_commit = "c" * 40
        return self.last_status_commit

    def stop(self) -> None:
        self.stopped = True

    def trigger_fetch(self) -> None:
        self.fetches += 1


@dataclass
class FakePlatform:
    spec: PlatformSpec
    needs_fetch: bool = False


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Registrations, FakeKube]:
    monkeypatch.setattr(module, "Sync", lambda connection, *_args: FakeSync(connection))
    monkeypatch.setattr(module, "PlatformSync", lambda spec, *_args: FakePlatform(spec))
    kube = FakeKube()
    config = config_from(tmp_path / "kubeconfig", work_dir=tmp_path)
    registrations = Registrations(
        config,
        kube,  # type: ignore[arg-type]
        FakeResolver(),  # type: ignore[arg-type]
        FakeQueue(),  # type: ignore[arg-type]
        lambda _name: True,
    )
    return registrations, kube


def binding(url: str = "https://git.example.com/team.git", generation: int = 1) -> dict:
    return {
        "metadata": {"name": "team", "namespace": "cluster-a", "generation": generation},
        "spec": {
            "url": url,
            "appNamespaces": ["team"],
            "appCluster": {"kubeconfigSecretRef": {"name": "app"}},
            "controlPlane": {"kubeconfigSecretRef": {"name": "binder"}},
        },
    }


def queued(registrations: Registrations) -> list[tuple[str, str]]:
    items = registrations.queue.items  # type: ignore[attr-defined]
    taken = list(items)
    items.clear()
    return taken


def run(registrations: Registrations) -> None:
    """Handle what is queued until nothing is."""
    while items := queued(registrations):
        for item in items:
            registrations.handle(item)


def test_a_binding_is_added_updated_and_removed(world: tuple[Registrations, FakeKube]) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    assert queued(registrations) == [("register", NAME)]
    registrations.handle(("register", NAME))
    first = registrations.records[NAME].sync
    assert registrations.records[NAME].followed == 1
    assert queued(registrations) == [("sync", NAME)]

    registrations.on_binding("MODIFIED", binding())  # our own status update comes back
    assert queued(registrations) == []

    registrations.on_binding("MODIFIED", binding("https://git.example.com/other.git", 2))
    registrations.handle(("register", NAME))
    assert first.stopped
    second = registrations.sync_of(NAME)
    assert second is not None
    assert second.connection.spec.url.endswith("other.git")
    assert registrations.records[NAME].followed == 2
    queued(registrations)

    registrations.on_binding("DELETED", binding())
    registrations.handle(("register", NAME))
    assert NAME not in registrations.records  # forgotten: one record, dropped


def test_an_unchanged_spec_in_a_new_generation_is_reported_observed(
    world: tuple[Registrations, FakeKube],
) -> None:
    registrations, kube = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    registrations.on_binding("MODIFIED", binding(generation=2))  # an explicit default, say
    assert queued(registrations) == [("sync", NAME)]
    registrations.handle(("sync", NAME))
    assert kube.statuses[-1]["observedGeneration"] == 2


def test_a_refused_spec_is_reported_once(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    refused = binding("file:///srv/team.git")
    registrations.on_binding("ADDED", refused)
    assert registrations.records[NAME].error
    assert registrations.spec_of(NAME) is None
    [status] = kube.statuses
    ready = by_type(status)["Ready"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert by_type(status)["Stalled"]["status"] == "True"
    registrations.on_binding("MODIFIED", {**refused, "status": status})  # our update, back
    assert len(kube.statuses) == 1


def test_status_is_written_only_when_it_changes(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    [status] = kube.statuses
    assert by_type(status)["Ready"]["status"] == "True"
    assert status["lastAppliedCommit"] == HEAD
    for _ in range(3):
        registrations.handle(("sync", NAME))
    assert len(kube.statuses) == 1

    sync = registrations.records[NAME].sync
    assert isinstance(sync, FakeSync)
    sync.refusals = (Rejection("bad.yaml", "no", "yes", 0),)
    registrations.handle(("sync", NAME))
    assert len(kube.statuses) == 2
    assert by_type(kube.statuses[-1])["Stalled"]["status"] == "True"


def test_config_registrations_are_shown_not_written(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    spec = registration_spec()
    registrations.records["team"] = Registration("team", ConfigEntry(), spec)
    registrations.handle(("register", "team"))
    registrations.handle(("sync", "team"))
    assert registrations.sync_of("team") is not None
    assert kube.statuses == []  # no RepositoryBinding to write to
    [shown] = registrations.shown()
    assert (shown["name"], shown["source"]) == ("team", "config")
    assert by_type(shown["status"])["Ready"]["status"] == "True"
    assert shown["status"]["lastAppliedCommit"] == HEAD


def test_an_unusable_secret_is_reported(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    registrations.resolver.broken[NAME] = "App Cluster kubeconfig is not usable"  # type: ignore[attr-defined]
    registrations.on_binding("ADDED", binding())
    with pytest.raises(KlutchError):
        run(registrations)
    assert "not usable" in (registrations.records[NAME].error or "")
    found = by_type(kube.statuses[-1])
    assert (found["SecretValid"]["status"], found["Stalled"]["reason"]) == (
        "False",
        "SecretInvalid",
    )
    # a tenant's broken Secret is its conditions' news, not the replica's readiness
    assert registrations.waiting() == ["RepositoryBindings not listed yet"]
    registrations.bindings.synced.set()
    assert registrations.waiting() == []


def test_the_platform_is_registered_under_its_own_key(
    world: tuple[Registrations, FakeKube],
) -> None:
    registrations, _ = world
    registrations.start_platform(platform_from("https://git.example.com/platform.git"))
    assert queued(registrations) == [("platform", PLATFORM)]
    assert registrations.platform is not None
    registrations.source_changed(PLATFORM)
    assert registrations.platform.needs_fetch  # type: ignore[attr-defined]
    assert queued(registrations) == [("platform", PLATFORM)]


def test_a_renewed_binder_secret_restarts_its_registrations(
    world: tuple[Registrations, FakeKube],
) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    queued(registrations)
    secret = {"metadata": {"namespace": "cluster-a", "name": "binder"}, "data": {"kubeconfig": "x"}}
    registrations.on_binder_secret("ADDED", secret)
    assert queued(registrations) == []  # the first sighting only records it
    registrations.on_binder_secret("MODIFIED", {**secret, "data": {"kubeconfig": "y"}})
    assert queued(registrations) == [("register", NAME)]


def test_a_released_registration_stops(world: tuple[Registrations, FakeKube]) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    sync = registrations.records[NAME].sync
    registrations.release(NAME)
    assert sync.stopped  # type: ignore[attr-defined]
    assert registrations.sync_of(NAME) is None


def annotated(obj: dict, **annotations: str) -> dict:
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations}}


REQUESTED = "gitops.klutch.anynines.com/requestedAt"
SUSPEND = "gitops.klutch.anynines.com/suspend"


def test_a_new_reconcile_request_fetches_and_is_answered(
    world: tuple[Registrations, FakeKube],
) -> None:
    # As Flux: ReconcileRequestedPredicate.Update (fluxcd/pkg runtime/predicates/
    # reconcile_requested.go) passes an update whose request value differs from the old object's,
    # or that the old object lacked; the value is no timestamp, any change asks (fluxcd/pkg
    # apis/meta/annotations.go); the status answers with the value in lastHandledReconcileAt
    # (ReconcileRequestStatus there).
    registrations, kube = world
    registrations.on_binding("ADDED", annotated(binding(), **{REQUESTED: "t1"}))
    run(registrations)
    assert kube.statuses[-1]["lastHandledReconcileAt"] == "t1"
    sync = registrations.records[NAME].sync
    assert isinstance(sync, FakeSync)

    registrations.on_binding("MODIFIED", annotated(binding(), **{REQUESTED: "t1"}))
    assert sync.fetches == 0  # the same request, answered already

    registrations.on_binding("MODIFIED", annotated(binding(), **{REQUESTED: "t2"}))
    assert sync.fetches == 1  # spec and generation unchanged: only the annotation asks
    registrations.handle(("sync", NAME))
    assert kube.statuses[-1]["lastHandledReconcileAt"] == "t2"


def test_a_suspended_binding_says_so_and_resumes(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    registrations.on_binding("MODIFIED", annotated(binding(), **{SUSPEND: "true"}))
    run(registrations)
    assert registrations.sync_of(NAME) is None  # nothing fetched, applied or written back
    status = kube.statuses[-1]
    found = by_type(status)
    assert (found["Ready"]["status"], found["Ready"]["reason"]) == ("Unknown", "Suspended")
    assert "klutch-gitops resume cluster-a/team" in found["Ready"]["message"]
    assert found["Reconciling"]["reason"] == "Suspended"
    assert found["Stalled"]["status"] == "False"
    assert status["lastAppliedCommit"] == HEAD  # what the last pass did stays shown
    assert metrics.REGISTRY.get_sample_value("klutch_gitops_suspended", {"repository": NAME}) == 1

    registrations.on_binding("MODIFIED", annotated(binding(), **{SUSPEND: "false"}))
    run(registrations)
    assert registrations.records[NAME].sync.passes == 1  # type: ignore[attr-defined]
    assert by_type(kube.statuses[-1])["Ready"]["reason"] == "Synced"
    assert metrics.REGISTRY.get_sample_value("klutch_gitops_suspended", {"repository": NAME}) == 0


def test_a_failed_write_back_is_its_own_condition(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    sync = registrations.records[NAME].sync
    assert isinstance(sync, FakeSync)
    assert by_type(kube.statuses[-1])["WrittenBack"]["reason"] == "UpToDate"
    sync.write_back_error = "push refused: 403"
    with pytest.raises(KlutchError):
        registrations.handle(("writeback", NAME))
    found = by_type(kube.statuses[-1])
    assert (found["WrittenBack"]["status"], found["WrittenBack"]["reason"]) == (
        "False",
        "WriteBackFailed",
    )
    assert "403" in found["WrittenBack"]["message"]
    assert found["Ready"]["reason"] == "WriteBackFailed"
    assert found["Reconciling"]["status"] == "True"  # retried
    assert registrations.records[NAME].error is None  # the pass itself is fine
    failures = "klutch_gitops_write_back_failures_total"
    assert metrics.REGISTRY.get_sample_value(failures, {"repository": NAME}) == 1
    sync.write_back_error = None
    registrations.handle(("writeback", NAME))
    found = by_type(kube.statuses[-1])
    assert (found["WrittenBack"]["reason"], found["Ready"]["reason"]) == ("WrittenBack", "Synced")


def test_status_metrics_follow_the_registration(world: tuple[Registrations, FakeKube]) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    ready = {"repository": NAME, "type": "Ready", "status": "True"}
    assert metrics.REGISTRY.get_sample_value("klutch_gitops_reconcile_condition", ready) == 1
    last = "klutch_gitops_last_successful_reconcile_timestamp_seconds"
    assert metrics.REGISTRY.get_sample_value(last, {"repository": NAME}) is not None
    registrations.on_binding("DELETED", binding())
    run(registrations)
    assert metrics.REGISTRY.get_sample_value("klutch_gitops_reconcile_condition", ready) is None
    assert metrics.REGISTRY.get_sample_value(last, {"repository": NAME}) is None
    assert registrations.shown() == []


def test_every_pass_logs_one_summary_line(
    world: tuple[Registrations, FakeKube], caplog: pytest.LogCaptureFixture
) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    with caplog.at_level(logging.INFO, logger="reconciler.reporting"):
        run(registrations)
    [line] = [r for r in caplog.records if r.getMessage() == "pass"]
    assert (line.repository, line.commit, line.outcome) == (NAME, HEAD[:12], "ready")  # type: ignore[attr-defined]
    assert (line.claims, line.refused, line.problems) == (1, 0, 0)  # type: ignore[attr-defined]
    assert line.seconds >= 0  # type: ignore[attr-defined]


def test_registrations_are_served_for_the_metrics_token_only(
    world: tuple[Registrations, FakeKube],
) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    token = b"metrics-token-0123456789"
    app = create_app(list, lambda urls: [], lambda e: 0, lambda e: 0, token, registrations.shown)
    with TestClient(app) as client:
        assert client.get("/registrations").status_code == 401
        wrong = client.get("/registrations", headers={"Authorization": "Bearer guess"})
        assert wrong.status_code == 401
        assert NAME not in wrong.text
        answer = client.get("/registrations", headers={"Authorization": f"Bearer {token.decode()}"})
    assert answer.status_code == 200
    [shown] = answer.json()["registrations"]
    assert (shown["name"], shown["source"]) == (NAME, "RepositoryBinding cluster-a/team")
    assert by_type(shown["status"])["Ready"]["reason"] == "Synced"
