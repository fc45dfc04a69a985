"""A repository's own ``pollInterval`` against the real stack and a real HTTPS Git server: with
the global interval at an hour and no webhook or reconcile request, a push to the registration
polled every 2 s is applied, and one to the registration on the global interval is not.

The remotes are served over HTTPS (tests/gitserver.py), not ``file://``: a ``file://`` remote is
watched through the file system too, which would see the push whatever the interval."""

from __future__ import annotations

import hashlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.git.remote import ls_remote
from reconciler.manager import Reconciler
from reconciler.triggers.sources import JITTER, Poller
from tests.env import Env
from tests.gitserver import GitServer
from tests.kit.claims import POSTGRES, claim
from tests.kit.tenant import Tenant
from tests.kit.wait import eventually

GLOBAL = 3600.0  # the config file's pollInterval: nothing is polled again during the test
OWN = 2.0  # the fast registration's own pollInterval
QUIET = 5 * OWN  # how long the hourly one is watched staying behind, after the fast one applied


def served(git_server: GitServer, bare: Path) -> str:
    """The https URL of a tenant's bare repository, linked under the server's root."""
    digest = hashlib.sha256(str(bare.resolve()).encode()).hexdigest()[:10]
    link = git_server.root / "polled" / f"{bare.stem}-{digest}.git"
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(bare.resolve(), target_is_directory=True)
    return git_server.url_of(link)


@pytest.fixture
def tenants(env: Env) -> Iterator[list[Tenant]]:
    """Two tenants registered in one reconciler: the first with ``pollInterval: 2s``, the
    second without one, under a global interval of an hour."""
    for name in ("fast", "hourly"):
        (env.tmp_path / name).mkdir()
    fast, hourly = (
        env.tenant(home=env.tmp_path / name, mode="files", start=False)
        for name in ("fast", "hourly")
    )
    specs = (
        replace(fast.spec, url=served(env.git_server, fast.remote), poll_interval=OWN),
        replace(hourly.spec, url=served(env.git_server, hourly.remote)),
    )
    config = replace(fast.config, repositories=specs, poll_interval=GLOBAL)
    world = [replace(fast, config=config), replace(hourly, config=config)]
    world[0].reconciler.start()
    yield world
    world[0].reconciler.stop()


def quiet(reconciler: Reconciler, name: str) -> None:
    """Wait until a registration's first poll answered and the pass it asked for has fetched
    and finished: nothing fetches its remote again but a poll that finds the branch moved."""
    registrations = reconciler.registrations
    eventually(lambda: registrations.poller.answered(name), f"{name}'s first poll")
    sync = eventually(lambda: reconciler.syncs.get(name), f"{name} registered")
    eventually(lambda: sync.last_pass and not sync.needs_fetch, f"{name}'s fetching pass")
    with registrations.lock(name):  # the pass in flight, if any, is over
        assert not sync.needs_fetch


def test_each_registration_is_polled_at_its_own_interval(tenants: list[Tenant]) -> None:
    fast, hourly = tenants
    for tenant in tenants:  # one reconciler, the first tenant's, follows both
        quiet(fast.reconciler, tenant.spec.name)

    hourly.push({"claims/db.yaml": claim("db", hourly.namespace)})
    fast.push({"claims/db.yaml": claim("db", fast.namespace)})
    pushed = time.monotonic()
    eventually(
        lambda: fast.app.get(POSTGRES, fast.namespace, "db"),
        "the claim pushed to the 2 s registration to be applied",
        timeout=10 * OWN,
    )
    applied = time.monotonic()
    print(f"pushed -> applied on the {OWN:.0f} s registration: {applied - pushed:.2f} s")

    time.sleep(QUIET)
    assert hourly.app.get(POSTGRES, hourly.namespace, "db") is None, (
        "the registration on the hourly global interval applied a push nobody announced"
    )


def bare_repository(directory: Path) -> str:
    """A bare repository with one commit on main, made with the real ``git``; its file:// URL."""
    bare, clone = directory / "remote.git", directory / "clone"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(bare)], check=True)
    subprocess.run(["git", "clone", "-q", str(bare), str(clone)], check=True, capture_output=True)
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run(
        ["git", *identity, "commit", "-q", "--allow-empty", "-m", "x"], cwd=clone, check=True
    )
    subprocess.run(["git", "push", "-q", "origin", "HEAD:refs/heads/main"], cwd=clone, check=True)
    return bare.as_uri()


def test_each_remote_is_asked_at_its_own_interval_in_time(tmp_path: Path) -> None:
    """The poller thread alone, with real ``git ls-remote``: a remote with its own 0.1 s, one
    on the poller's 0.05 s every tenth interval (a watched file:// remote's safety net), one on
    an hour. The counts follow elapsed time, however long each ask took (a loaded machine)."""
    urls = {}
    for name in ("own", "tenth", "hourly"):
        (tmp_path / name).mkdir()
        urls[name] = bare_repository(tmp_path / name)
    asked: list[str] = []

    def counting(key: str, url: str, branch: str) -> str | None:
        asked.append(key)
        return ls_remote(url, branch, timeout=10)

    poller: Poller[str] = Poller(0.05, counting, lambda _key: None)
    poller.watch("own", urls["own"], "main", 0.1)
    poller.watch("tenth", urls["tenth"], "main", every=10)
    poller.watch("hourly", urls["hourly"], "main", 3600.0)
    started = time.monotonic()
    poller.start()
    try:
        eventually(lambda: asked.count("own") >= 20, "20 asks of the 0.1 s remote", timeout=60)
    finally:
        poller.stop()
    elapsed = time.monotonic() - started
    counts = {name: asked.count(name) for name in urls}
    print(f"asks in {elapsed:.2f} s: {counts}")
    assert counts["hourly"] == 1  # the first ask, at once
    assert 2 <= counts["tenth"] <= elapsed / (0.5 * (1 - JITTER)) + 1
    assert counts["own"] <= elapsed / (0.1 * (1 - JITTER)) + 1
