"""One record per registration (reconciler/registration.py): forgetting a registration drops all
it held, its origin says where its status goes, its decisions on a RepositoryBinding event, and
the work kinds' handler table."""

from __future__ import annotations

import pytest

from klutch_gitops.config import RegistrationSpec
from reconciler.registration import BindingRef, ConfigEntry, Registration
from reconciler.registrations import Registrations
from reconciler.steering import resume_hint
from reconciler.work import Work
from tests.kit.specs import registration_spec
from tests.unit.reconciler.test_registrations import (  # noqa: F401
    NAME,
    FakeKube,
    FakeSync,
    binding,
    queued,
    run,
    world,
)


def spec(url: str = "https://git.example.com/t.git") -> RegistrationSpec:
    return registration_spec(url=url)


def test_forgetting_drops_the_reference_error_and_the_lock(
    world: tuple[Registrations, FakeKube],  # noqa: F811
) -> None:
    registrations, _ = world
    registrations.resolver.broken[NAME] = "binder kubeconfig is not usable"  # type: ignore[attr-defined]
    registrations.on_binding("ADDED", binding())
    with pytest.raises(Exception, match="not usable"):
        run(registrations)
    record = registrations.records[NAME]
    assert record.reference_error == "binder kubeconfig is not usable"
    registrations.on_binding("DELETED", binding())
    run(registrations)
    assert registrations.records == {}  # nothing left: no error, no lock, no generation

    registrations.resolver.broken.clear()  # type: ignore[attr-defined]
    registrations.on_binding("ADDED", binding())
    run(registrations)
    again = registrations.records[NAME]
    assert again is not record
    assert again.lock is not record.lock
    assert (again.reference_error, again.error) == (None, None)


def test_a_released_registration_keeps_its_spec_and_drops_its_report(
    world: tuple[Registrations, FakeKube],  # noqa: F811
) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    record = registrations.records[NAME]
    record.write_back_error, record.handled = "push refused", "t1"
    registrations.release(NAME)
    assert registrations.records[NAME] is record  # another replica's now: still routed
    assert record.spec is not None
    assert record.sync is None
    assert (record.shown, record.write_back_error, record.handled) == (None, None, None)
    assert registrations.shown() == []


def test_a_binding_recreated_while_its_registration_stops_is_kept(
    world: tuple[Registrations, FakeKube],  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    registrations.on_binding("DELETED", binding())
    forget = registrations.reporter.forget

    def recreated_meanwhile(record: Registration) -> None:
        forget(record)
        registrations.on_binding("ADDED", binding(generation=2))  # the informer's thread

    monkeypatch.setattr(registrations.reporter, "forget", recreated_meanwhile)
    registrations.handle((Work.REGISTER, NAME))
    monkeypatch.setattr(registrations.reporter, "forget", forget)
    assert registrations.spec_of(NAME) is not None  # not dropped with the spec it had
    run(registrations)
    assert registrations.records[NAME].followed == 2
    assert registrations.sync_of(NAME) is not None


def test_the_origin_says_where_the_status_goes(
    world: tuple[Registrations, FakeKube],  # noqa: F811
) -> None:
    registrations, _ = world
    registrations.on_binding("ADDED", binding())
    run(registrations)
    record = registrations.records[NAME]
    assert record.origin == record.binding == BindingRef("cluster-a", "team")
    assert str(record.origin) == "RepositoryBinding cluster-a/team"
    assert resume_hint(record.origin, NAME) == "resume with: klutch-gitops resume cluster-a/team"

    entry = Registration("team", ConfigEntry(), spec())
    assert (entry.binding, str(entry.origin)) == (None, "config")
    assert "in the reconciler's config" in resume_hint(entry.origin, "team")


def test_following_a_binding_event_decides_the_work() -> None:
    record = Registration(NAME, BindingRef("cluster-a", "team"))
    assert record.follow(spec(), 1, None, None) is Work.REGISTER
    assert (record.generation, record.followed) == (1, None)  # followed once registered
    record.followed = 1
    record.sync = FakeSync(None)  # type: ignore[arg-type]
    assert record.follow(spec(), 1, None, "t0") is None  # our own status update, back
    assert record.handled == "t0"  # what the status says was answered, until a pass answers
    assert record.follow(spec(), 2, None, None) is Work.SYNC  # the same spec, newer
    assert (record.generation, record.followed) == (2, 2)
    assert record.follow(spec(), 2, "t1", None) is None
    assert record.sync.fetches == 1  # type: ignore[attr-defined]  # a new request fetches
    assert record.follow(spec(), 2, "t1", None) is None
    assert record.sync.fetches == 1  # type: ignore[attr-defined]
    assert record.follow(spec("https://git.example.com/u.git"), 3, "t1", None) is Work.REGISTER


def test_a_refusal_and_a_deletion_leave_no_spec() -> None:
    record = Registration(NAME, BindingRef("cluster-a", "team"), spec(), generation=2, followed=2)
    assert record.refuse("file:// is not allowed")  # its former spec's sync must stop
    assert (record.spec, record.error) == (None, "file:// is not allowed")
    assert not record.refuse("still not")
    record.requested = "t1"
    record.went()
    assert (record.generation, record.followed, record.requested) == (None, None, None)


def test_every_kind_of_work_has_its_handler(
    world: tuple[Registrations, FakeKube],  # noqa: F811
) -> None:
    registrations, _ = world
    assert set(registrations.handlers) == set(Work)
    # logs and metrics keep the words they had
    assert [str(kind) for kind in Work] == ["register", "sync", "writeback", "platform"]
    assert (Work.SYNC, NAME) == ("sync", NAME)  # a key queued as text is the same key
