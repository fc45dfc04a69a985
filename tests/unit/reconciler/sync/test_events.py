"""The Event recorder's aggregation (against an in-memory Events API) and the line a refused
claim shows (reconciler/sync/events.py; its Synced condition: test_app_status.py)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from klutch_gitops.kube.client import KubeError, Resource
from klutch_gitops.kube.events import NORMAL, WARNING, EventRecorder
from klutch_gitops.kube.resources import EVENTS, SECRETS
from reconciler.manifests import Identity, Rejection
from reconciler.sync import events

SECRET = {"metadata": {"name": "s", "namespace": "team", "uid": "u-1"}}


class FakeEvents:
    """Core/v1 Events in a dict, as the apiserver keeps them: generateName, merge patch, 404."""

    def __init__(self) -> None:
        self.items: dict[str, dict] = {}
        self.calls: list[str] = []
        self.refuse_create: KubeError | None = None

    def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict:
        assert resource == EVENTS
        self.calls.append("create")
        if self.refuse_create is not None:
            raise self.refuse_create
        body = copy.deepcopy(dict(obj))
        body["metadata"]["name"] = f"{body['metadata']['generateName']}{len(self.items)}"
        self.items[body["metadata"]["name"]] = body
        return body

    def patch(
        self, resource: Resource, namespace: str | None, name: str, patch: Mapping[str, Any]
    ) -> dict:
        self.calls.append("patch")
        if name not in self.items:
            raise KubeError(404, "NotFound", f'events "{name}" not found')
        self.items[name].update(patch)
        return self.items[name]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> FakeEvents:
    return FakeEvents()


@pytest.fixture
def clock() -> Clock:
    return Clock()


class Flushed:
    """A recorder whose every record waits for its write (it writes in a thread of its own)."""

    def __init__(self, recorder: EventRecorder) -> None:
        self.recorder = recorder

    def record(self, *args: Any) -> None:
        self.recorder.record(*args)
        assert self.recorder.flush()


def recorder(api: FakeEvents, clock: Clock, **options: Any) -> Flushed:
    return Flushed(EventRecorder(api, "reconciler-0", clock=clock, **options))


class Blocked(FakeEvents):
    """An Events API that answers only once let go: a slow apiserver."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.go = threading.Event()

    def create(self, resource: Resource, obj: Mapping[str, Any]) -> dict:
        self.entered.set()
        assert self.go.wait(10)
        return super().create(resource, obj)


def test_recording_does_not_wait_for_the_apiserver_and_drops_what_overflows() -> None:
    """client-go's broadcaster writes in its own goroutine and drops when 1000 wait
    (tools/record/event.go: maxQueuedEvents, watch.DropIfChannelFull)."""
    api = Blocked()
    told = EventRecorder(api, "reconciler-0", max_queued=2)

    def tell(name: str) -> None:
        told.record(SECRETS, {"metadata": {**SECRET["metadata"], "name": name}}, WARNING, "X", "y")

    tell("a")
    assert api.entered.wait(10)  # the writer is in the slow call; record returned at once
    for name in ("b", "c", "d"):  # two wait, one overflows
        tell(name)
    assert api.items == {}
    api.go.set()
    assert told.flush()
    assert sorted(e["involvedObject"]["name"] for e in api.items.values()) == ["a", "b", "c"]
    tell("d")  # dropped, so not told: the next pass tells it
    assert told.flush()
    assert len(api.items) == 4


def test_a_first_event_is_created_with_who_reported_it(api: FakeEvents, clock: Clock) -> None:
    recorder(api, clock).record(SECRETS, SECRET, WARNING, "Invalid", "bad token")
    [event] = api.items.values()
    assert event["count"] == 1
    assert event["type"] == WARNING
    assert event["involvedObject"]["uid"] == "u-1"
    assert event["metadata"]["namespace"] == "team"
    assert event["source"] == {"component": "klutch-gitops", "host": "reconciler-0"}
    assert (event["reportingComponent"], event["reportingInstance"]) == (
        "klutch-gitops",
        "reconciler-0",
    )


def test_a_standing_situation_told_every_pass_is_one_event_counted_at_most_every_5_min(
    api: FakeEvents, clock: Clock
) -> None:
    told = recorder(api, clock)
    for _ in range(100):  # passes every few seconds
        told.record(SECRETS, SECRET, WARNING, "Invalid", "bad token")
        clock.now += 2
    assert api.calls == ["create"]  # 200 s: not once more
    clock.now += 300
    told.record(SECRETS, SECRET, WARNING, "Invalid", "bad token")
    [event] = api.items.values()
    assert event["count"] == 2
    assert api.calls == ["create", "patch"]


def test_another_message_reason_type_or_object_is_another_event(
    api: FakeEvents, clock: Clock
) -> None:
    told = recorder(api, clock)
    told.record(SECRETS, SECRET, WARNING, "Invalid", "bad token")
    told.record(SECRETS, SECRET, WARNING, "Invalid", "no token")
    told.record(SECRETS, SECRET, WARNING, "Expired", "bad token")
    told.record(SECRETS, SECRET, NORMAL, "Invalid", "bad token")
    other = {"metadata": {**SECRET["metadata"], "uid": "u-2"}}  # deleted and made again
    told.record(SECRETS, other, WARNING, "Invalid", "bad token")
    assert len(api.items) == 5
    assert all(e["count"] == 1 for e in api.items.values())


def test_an_expired_event_is_created_again(api: FakeEvents, clock: Clock) -> None:
    told = recorder(api, clock, repeat_seconds=0)
    told.record(SECRETS, SECRET, WARNING, "Invalid", "bad token")
    api.items.clear()  # the apiserver's --event-ttl passed
    told.record(SECRETS, SECRET, WARNING, "Invalid", "bad token")
    assert api.calls == ["create", "patch", "create"]
    [event] = api.items.values()
    assert event["count"] == 1


def test_the_cache_is_bounded_least_recently_told_first(api: FakeEvents, clock: Clock) -> None:
    told = recorder(api, clock, max_entries=2)
    for message in ("a", "b", "a", "c"):  # "b" is the least recently told when "c" comes
        told.record(SECRETS, SECRET, WARNING, "Invalid", message)
    told.record(SECRETS, SECRET, WARNING, "Invalid", "a")  # still known: dropped as a repeat
    assert api.calls == ["create"] * 3
    told.record(SECRETS, SECRET, WARNING, "Invalid", "b")  # forgotten: a new Event
    assert api.calls == ["create"] * 4


def test_a_failed_write_is_not_remembered_and_never_raises(api: FakeEvents, clock: Clock) -> None:
    told = recorder(api, clock)
    api.refuse_create = KubeError(403, "Forbidden", "may not create events")
    told.record(SECRETS, SECRET, WARNING, "Invalid", "bad token")
    api.refuse_create = None
    told.record(SECRETS, SECRET, WARNING, "Invalid", "bad token")  # tried again at once
    assert len(api.items) == 1


# -- the line a claim's refusal shows ------------------------------------------------------


def test_a_refusal_names_file_document_field_and_fix() -> None:
    rejection = Rejection(
        "claims/db.yaml",
        "plan 'jumbo' is not offered",
        "use one of: nano, small",
        document=1,
        field="spec.plan",
        identity=Identity("anynines.com", "PostgresqlInstance", "team", "db"),
    )
    unnamed = Rejection("claims/broken.yaml", "not YAML", "fix the syntax")
    told = events.refusals_by_claim((rejection, unnamed))
    assert told == {
        rejection.identity: "claims/db.yaml (document 2), field spec.plan: plan 'jumbo' is not "
        "offered; fix: use one of: nano, small"
    }
