"""The set of registrations (reconciler/registrations.py) against in-memory fakes: added, updated
and removed RepositoryBindings, a refused spec, the platform, binder Secrets, and a status written
only when it changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from klutch_gitops.config import Config, PlatformSpec, RepositorySpec, SecretRef
from klutch_gitops.errors import KlutchError
from klutch_gitops.kube.conditions import by_type
from klutch_gitops.manifests import Rejection
from reconciler import registrations as module
from reconciler.registrations import PLATFORM, Registrations
from reconciler.sync.outcome import PassOutcome

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
class FakeBinding:
    spec: RepositorySpec
    credentials: Any = None


class FakeResolver:
    def __init__(self) -> None:
        self.broken: dict[str, str] = {}  # registration -> why its Secrets cannot be used

    def binding(self, spec: RepositorySpec) -> FakeBinding:
        if spec.name in self.broken:
            raise KlutchError(self.broken[spec.name], "fix the Secret")
        return FakeBinding(spec)

    def credentials(self, *_args: Any) -> None:
        return None

    def value(self, *_args: Any) -> bytes:
        return b"platform-secret"


@dataclass
class FakeSync:
    binding: FakeBinding
    head: str | None = None
    last_pass: PassOutcome | None = None
    pending: bool = True
    last_status_commit: str | None = None
    conflicts: dict = field(default_factory=dict)
    stopped: bool = False
    fetches: int = 0
    refusals: tuple[Rejection, ...] = ()

    def sync(self) -> None:
        self.head = HEAD
        self.last_pass = PassOutcome(HEAD, 1, self.refusals)
        self.pending = False

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
    monkeypatch.setattr(module, "RepositorySync", lambda binding, *_args: FakeSync(binding))
    monkeypatch.setattr(module, "PlatformSync", lambda spec, *_args: FakePlatform(spec))
    kube = FakeKube()
    config = Config(control_plane_kubeconfig=tmp_path / "kubeconfig", work_dir=tmp_path)
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
    first = registrations.syncs[NAME]
    assert registrations.followed[NAME] == 1
    assert queued(registrations) == [("sync", NAME)]

    registrations.on_binding("MODIFIED", binding())  # our own status update comes back
    assert queued(registrations) == []

    registrations.on_binding("MODIFIED", binding("https://git.example.com/other.git", 2))
    registrations.handle(("register", NAME))
    assert first.stopped
    assert registrations.syncs[NAME].binding.spec.url.endswith("other.git")
    assert registrations.followed[NAME] == 2
    queued(registrations)

    registrations.on_binding("DELETED", binding())
    registrations.handle(("register", NAME))
    assert NAME not in registrations.syncs
    assert NAME not in registrations.specs


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
    assert NAME in registrations.errors
    assert NAME not in registrations.specs
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

    sync = registrations.syncs[NAME]
    assert isinstance(sync, FakeSync)
    sync.refusals = (Rejection("bad.yaml", "no", "yes", 0),)
    registrations.handle(("sync", NAME))
    assert len(kube.statuses) == 2
    assert by_type(kube.statuses[-1])["Stalled"]["status"] == "True"


def test_config_registrations_report_no_status(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    spec = RepositorySpec(
        "team", "https://git.example.com/t.git", "c", ("t",), SecretRef(), SecretRef()
    )
    registrations.specs["team"] = spec
    registrations.handle(("register", "team"))
    registrations.handle(("sync", "team"))
    assert "team" in registrations.syncs
    assert kube.statuses == []


def test_an_unusable_secret_is_reported(world: tuple[Registrations, FakeKube]) -> None:
    registrations, kube = world
    registrations.resolver.broken[NAME] = "App Cluster kubeconfig is not usable"  # type: ignore[attr-defined]
    registrations.on_binding("ADDED", binding())
    with pytest.raises(KlutchError):
        run(registrations)
    assert "not usable" in registrations.errors[NAME]
    found = by_type(kube.statuses[-1])
    assert (found["SecretValid"]["status"], found["Stalled"]["reason"]) == (
        "False",
        "SecretInvalid",
    )
    assert registrations.waiting() == [
        f"repository {NAME}: App Cluster kubeconfig is not usable\n  fix: fix the Secret",
        "RepositoryBindings not listed yet",
    ]


def test_the_platform_is_registered_under_its_own_key(
    world: tuple[Registrations, FakeKube],
) -> None:
    registrations, _ = world
    registrations.start_platform(PlatformSpec(url="https://git.example.com/platform.git"))
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
    sync = registrations.syncs[NAME]
    registrations.release(NAME)
    assert sync.stopped  # type: ignore[attr-defined]
    assert NAME not in registrations.syncs
