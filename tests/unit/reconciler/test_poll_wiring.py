"""A RepositoryBinding's ``spec.pollInterval`` reaches the poller (reconciler/registrations.py
``watch_source``): at registration, again when the binding changes it, back to the global one
when it is removed, never below the floor a tenant may set."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.registrations import MIN_POLL_INTERVAL, Registrations
from tests.unit.reconciler.test_registrations import NAME, FakeKube, binding, run, world  # noqa: F401


class RecordingPoller:
    def __init__(self) -> None:
        self.watched: dict[str, tuple[str, str, float | None, int]] = {}

    def watch(
        self, key: str, url: str, branch: str, interval: float | None = None, every: int = 1
    ) -> None:
        self.watched[key] = (url, branch, interval, every)

    def unwatch(self, key: str) -> None:
        self.watched.pop(key, None)


def with_interval(value: str | None, generation: int) -> dict:
    obj = binding(generation=generation)
    if value is not None:
        obj["spec"]["pollInterval"] = value
    return obj


@pytest.fixture
def poller(world: tuple[Registrations, FakeKube]) -> RecordingPoller:  # noqa: F811
    registrations, _ = world
    recording = RecordingPoller()
    registrations.poller = recording  # type: ignore[assignment]
    return recording


def test_a_bindings_poll_interval_follows_its_spec(
    world: tuple[Registrations, FakeKube],  # noqa: F811
    poller: RecordingPoller,
) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", with_interval("2s", 1))
    run(registrations)
    assert poller.watched[NAME][2:] == (2.0, 1)

    registrations.on_binding("MODIFIED", with_interval("1h", 2))
    run(registrations)
    assert poller.watched[NAME][2] == 3600.0

    registrations.on_binding("MODIFIED", with_interval(None, 3))
    run(registrations)
    assert poller.watched[NAME][2] is None  # the config file's pollInterval

    registrations.on_binding("MODIFIED", with_interval("1ms", 4))
    run(registrations)
    assert poller.watched[NAME][2] == MIN_POLL_INTERVAL

    registrations.on_binding("DELETED", with_interval(None, 4))
    run(registrations)
    assert NAME not in poller.watched


def test_a_watched_file_remote_polls_every_tenth_of_its_own_interval(
    world: tuple[Registrations, FakeKube],  # noqa: F811
    poller: RecordingPoller,
    tmp_path: Path,
) -> None:
    registrations, _ = world
    registrations.watcher.watch = lambda *_args: None  # type: ignore[method-assign]
    registrations.watch_source("local", f"file://{tmp_path}", "main", 5.0)
    assert poller.watched["local"][2:] == (5.0, 10)
