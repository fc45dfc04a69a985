import threading
import time

import pytest

from klutch_gitops.kube.workqueue import JITTER, WorkQueue, run_workers

WAIT = 5.0  # generous bound for events that must happen; never asserted as a duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def test_a_waiting_key_is_queued_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    for key in ["a", "b", "a", "a", "b", "c"]:
        queue.add(key)
    assert len(queue) == 3
    assert [queue.get(timeout=0) for _ in range(3)] == ["a", "b", "c"]
    assert queue.get(timeout=0) is None


def test_readding_while_processing_requeues_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0
    assert queue.get(timeout=0) is None  # not handed out while processing
    queue.done("a")
    assert len(queue) == 1
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None


def test_a_key_is_never_processed_by_two_workers_at_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first_started = threading.Event()
    release = threading.Event()
    lock = threading.Lock()
    active: dict[str, int] = {}
    overlaps: list[str] = []
    calls: list[str] = []

    def handler(key: str) -> None:
        with lock:
            active[key] = active.get(key, 0) + 1
            if active[key] > 1:
                overlaps.append(key)
            calls.append(key)
        if key == "a" and not first_started.is_set():
            first_started.set()
            release.wait(WAIT)
        with lock:
            active[key] -= 1

    threads = run_workers(queue, handler, workers=3, name="test")
    queue.add("a")
    assert first_started.wait(WAIT)
    queue.add("a")  # while "a" is processing: must wait for it
    queue.add("b")  # another key runs in parallel
    deadline = time.monotonic() + WAIT
    while "b" not in calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls == ["a", "b"]
    release.set()
    deadline = time.monotonic() + WAIT
    while calls.count("a") < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls.count("a") == 2
    assert overlaps == []
    queue.shutdown()
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive()


def test_add_after_hands_keys_out_in_due_order() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("late", 2.0)
    queue.add_after("early", 1.0)
    queue.add_after("late", 5.0)  # a later add does not postpone the pending one
    assert len(queue) == 0
    assert queue.get(timeout=0) is None
    clock.advance(1.0)
    assert queue.get(timeout=0) == "early"
    assert queue.get(timeout=0) is None
    clock.advance(1.0)
    assert queue.get(timeout=0) == "late"
    clock.advance(10.0)
    assert queue.get(timeout=0) is None


def test_add_after_brings_an_earlier_due_time_forward() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(clock=clock)
    queue.add_after("a", 10.0)
    queue.add_after("a", 1.0)
    clock.advance(1.0)
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    clock.advance(20.0)
    assert queue.get(timeout=0) is None  # the superseded entry does not fire again


def test_add_after_wakes_a_blocked_getter_in_real_time() -> None:
    queue: WorkQueue[str] = WorkQueue()
    got: list[str | None] = []
    getter = threading.Thread(target=lambda: got.append(queue.get(timeout=WAIT)))
    getter.start()
    time.sleep(0.05)  # let it block with nothing due
    queue.add_after("a", 0.1)
    queue.add_after("b", 0.05)
    getter.join(WAIT)
    assert got == ["b"]
    assert queue.get(timeout=WAIT) == "a"


def test_back_off_grows_per_key_and_is_capped() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(base_delay=1.0, max_delay=8.0, clock=clock)
    for failures, full in enumerate([1.0, 2.0, 4.0, 8.0, 8.0, 8.0]):
        queue.add_rate_limited("a")
        assert queue.failures("a") == failures + 1
        clock.advance(full * (1 - JITTER) - 0.001)
        assert queue.get(timeout=0) is None, f"due too early after failure {failures + 1}"
        clock.advance(full * JITTER + 0.001)
        assert queue.get(timeout=0) == "a"
        queue.done("a")
    assert queue.failures("b") == 0


def test_forget_resets_the_back_off() -> None:
    clock = FakeClock()
    queue: WorkQueue[str] = WorkQueue(base_delay=1.0, clock=clock)
    for _ in range(4):
        queue.add_rate_limited("a")
    assert queue.failures("a") == 4
    queue.forget("a")
    assert queue.failures("a") == 0
    clock.advance(100.0)
    assert queue.get(timeout=0) == "a"
    queue.done("a")
    queue.add_rate_limited("a")
    clock.advance(1.0)
    assert queue.get(timeout=0) == "a"  # back to the base delay


def test_token_bucket_spaces_rate_limited_adds_beyond_the_burst() -> None:
    clock = FakeClock()
    queue: WorkQueue[int] = WorkQueue(base_delay=0.001, qps=10.0, burst=2, clock=clock)
    for key in range(4):
        queue.add_rate_limited(key)
    clock.advance(0.01)
    assert {queue.get(timeout=0), queue.get(timeout=0)} == {0, 1}
    assert queue.get(timeout=0) is None
    clock.advance(0.1)
    assert queue.get(timeout=0) == 2
    assert queue.get(timeout=0) is None
    clock.advance(0.1)
    assert queue.get(timeout=0) == 3


def test_plain_adds_are_not_rate_limited() -> None:
    queue: WorkQueue[int] = WorkQueue(qps=1.0, burst=1, clock=FakeClock())
    for key in range(10):
        queue.add(key)
    assert len(queue) == 10


def test_shutdown_wakes_blocked_getters() -> None:
    queue: WorkQueue[str] = WorkQueue()
    results: list[str | None] = []
    getters = [threading.Thread(target=lambda: results.append(queue.get())) for _ in range(3)]
    for getter in getters:
        getter.start()
    time.sleep(0.05)
    queue.shutdown()
    for getter in getters:
        getter.join(WAIT)
        assert not getter.is_alive()
    assert results == [None, None, None]
    queue.add("a")
    assert queue.get() is None


def test_run_workers_retries_with_back_off_and_forgets_after_success(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue: WorkQueue[str] = WorkQueue(base_delay=0.01, max_delay=0.05)
    attempts: list[int] = []
    succeeded = threading.Event()

    def handler(key: str) -> None:
        attempts.append(queue.failures(key))
        if len(attempts) < 4:
            raise RuntimeError("cluster unreachable")
        succeeded.set()

    threads = run_workers(queue, handler, workers=2, name="sync")
    queue.add("repo-a")
    assert succeeded.wait(WAIT)
    queue.shutdown()
    for thread in threads:
        thread.join(WAIT)
    assert attempts == [0, 1, 2, 3]
    assert queue.failures("repo-a") == 0
    failures = [r for r in caplog.records if r.name == "klutch_gitops.kube.workqueue"]
    assert len(failures) == 3
    assert all(r.key == "repo-a" and r.exc_info for r in failures)
