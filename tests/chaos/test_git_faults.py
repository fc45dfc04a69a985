"""Git misbehaving under a running reconciler: the remote gone for a while, and people pushing so
often that the status push keeps being rejected. No human commit is lost, no status commit is
made twice, and the status reaches Git once the remote lets it."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

from klutch_gitops.config_file import defaults
from reconciler.git.checkout import Checkout
from reconciler.sync.writeback import write_back
from tests.kit.claims import POSTGRES, claim, git_claims, is_ready
from tests.kit.git import commits, duplicates, git, lost, touching
from tests.kit.tenant import Tenant, mirrored, reconciled, report_ready
from tests.kit.wait import eventually

from .harness import ReconcilerProcess

REJECTIONS = 5  # rejected status pushes to see before the people stop pushing
# A person's push landing while the server receives ours: main moves, once, to what they pushed
# to refs/heads/staging before. git refuses ref updates inside the push's object quarantine.
RACING_PUSH = """#!/bin/sh
env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \\
    git update-ref refs/heads/main "$(git rev-parse refs/heads/staging)"
rm -- "$0"
"""


def status_in_git(tenant: Tenant, name: str) -> bool:
    return is_ready(git_claims(tenant.remote)[name].get("status"))


def test_an_unreachable_remote_holds_the_status_commit_until_it_is_back(
    tenant: Tenant, reconciler: ReconcilerProcess
) -> None:
    pushed = [tenant.push({"claims/db.yaml": claim("db", tenant.namespace)}, "a database")]
    reconciler.start()
    eventually(lambda: mirrored(tenant, git_claims(tenant.remote)), "the claim everywhere", 120)
    eventually(lambda: reconciled(tenant) == pushed[-1], "the first reconcile report", 120)

    away = tenant.remote.with_name(f"{tenant.remote.name}.away")
    tenant.remote.rename(away)  # what a file:// remote does when the server is down
    try:
        report_ready(tenant, "db")
        eventually(
            lambda: is_ready(tenant.app.get(POSTGRES, tenant.namespace, "db").get("status")),
            "status in the App Cluster: the clusters do not wait for Git",
            120,
        )
        name = tenant.config.repositories[0].name

        def failing() -> list[str]:
            """Messages of the registration's False conditions that name the remote."""
            status = reconciler.registrations().get(name) or {}
            return [
                c["message"]
                for c in status.get("conditions") or []
                if c["status"] == "False" and tenant.remote.name in c.get("message", "")
            ]

        # a tenant's remote is its own condition (Fetched or WrittenBack), not the readiness
        [reason, *_] = eventually(failing, "a condition naming the unreachable remote", 120)
        assert "git fetch failed" in reason
        answer = reconciler.readyz()
        assert answer is not None
        assert answer.status_code == 200

        def failed_write_backs() -> int:
            return sum(
                1
                for r in reconciler.records()
                if "('writeback'" in r["message"] and "failed" in r["message"]
            )

        # down for a while: the status commit is retried, with back-off, and the rest goes on
        eventually(lambda: failed_write_backs() >= 2, "a retried write-back", 120)
        assert any(
            r["level"] == "warning"
            and r.get("repository") == name
            and tenant.remote.name in r.get("error", "")
            for r in reconciler.records()
        )
    finally:
        away.rename(tenant.remote)

    eventually(lambda: status_in_git(tenant, "db"), "the held status commit to be pushed", 120)
    pushed.append(tenant.push({"claims/late.yaml": claim("late", tenant.namespace)}, "one more"))
    eventually(lambda: mirrored(tenant, git_claims(tenant.remote)), "the new claim everywhere", 120)
    eventually(lambda: reconciled(tenant) == pushed[-1], "the new commit reconciled", 120)
    reconciler.wait_ready()

    history = commits(tenant.remote)
    assert lost(tenant.remote, pushed) == []
    assert duplicates(history) == []
    assert len(touching(history, "claims/db.yaml")) == 1


class People:
    """People pushing commits of their own files to main as fast as they can, in a thread."""

    def __init__(self, tenant: Tenant) -> None:
        self.tenant = tenant
        self.pushed: dict[str, tuple[str, str]] = {}  # sha -> the file it added, its text
        self.failure: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="people", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> dict[str, tuple[str, str]]:
        self._stop.set()
        self._thread.join(timeout=120)
        if self.failure is not None:
            raise self.failure
        return self.pushed

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                note, text = f"notes/{len(self.pushed):03d}.md", f"note {len(self.pushed)}"
                sha = self.tenant.push({note: f"{text}\n"}, f"Add {note}")
                self.pushed[sha] = (note, text)
        except BaseException as error:  # pytest.fail after ten rejections in a row, too
            self.failure = error


def test_a_status_push_rejected_again_and_again_loses_and_repeats_nothing(
    tenant: Tenant, reconciler: ReconcilerProcess
) -> None:
    pushed = [tenant.push({"claims/db.yaml": claim("db", tenant.namespace)}, "a database")]
    reconciler.start()
    eventually(lambda: mirrored(tenant, git_claims(tenant.remote)), "the claim everywhere", 120)

    people = People(tenant)
    people.start()
    try:
        report_ready(tenant, "db")

        def rejections() -> int:
            return sum(
                1
                for r in reconciler.records()
                if r["message"].startswith("status push to") and "rejected" in r["message"]
            )

        eventually(lambda: rejections() >= REJECTIONS, "status pushes to be rejected", 180)
    finally:
        notes = people.stop()
    pushed += list(notes)

    eventually(lambda: status_in_git(tenant, "db"), "the status commit", 120)
    eventually(lambda: reconciled(tenant) == pushed[-1], "the last push reconciled", 120)

    history = commits(tenant.remote)
    assert lost(tenant.remote, pushed) == []
    for sha, (note, text) in notes.items():  # and what they wrote is on main
        assert tenant.remote_file(note) == text, sha
    assert duplicates(history) == []
    assert len(touching(history, "claims/db.yaml")) == 1
    assert mirrored(tenant, git_claims(tenant.remote))
    # a lost race is retried as such, never reported as a failed push
    assert not [r for r in reconciler.records() if "git push failed" in json.dumps(r)]


def test_a_push_that_loses_the_race_inside_the_server_is_retried(tmp_path: Path) -> None:
    """Between the ref advertisement and the ref update, a person's push wins: git answers
    "[remote rejected] (failed to update ref)", not "[rejected]". It is the same race, so the
    status commit is made again on top of theirs, not given up as an error."""
    remote, person = tmp_path / "team.git", tmp_path / "person"
    subprocess.run(["git", "init", "-q", "--bare", "-b", "main", str(remote)], check=True)
    subprocess.run(
        ["git", "clone", "-q", str(remote), str(person)], check=True, capture_output=True
    )
    for setting in (("user.name", "Human"), ("user.email", "human@example.com")):
        git(person, "config", *setting)
    git(person, "checkout", "-q", "-b", "main")
    (person / "README.md").write_text("team\n")
    git(person, "add", "-A")
    git(person, "commit", "-q", "-m", "start")
    git(person, "push", "-q", "origin", "main")
    source = git(person, "rev-parse", "HEAD")
    (person / "NOTES.md").write_text("a person's notes\n")
    git(person, "add", "-A")
    git(person, "commit", "-q", "-m", "a person's push")
    git(person, "push", "-q", "origin", "HEAD:refs/heads/staging")
    theirs = git(person, "rev-parse", "HEAD")
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(RACING_PUSH)
    hook.chmod(0o755)

    checkout = Checkout.open_or_clone(f"file://{remote}", "main", tmp_path / "work")
    ours = write_back(
        checkout,
        lambda _tree: {"status.yaml": b"phase: Ready\n"},
        "status",
        source,
        defaults().bot,
        sleep=lambda _seconds: None,
    )

    assert not hook.exists()  # the race happened
    assert ours is not None
    assert git(remote, "rev-parse", "main") == ours
    assert git(remote, "rev-parse", f"{ours}^") == theirs  # on top of the person's push
    assert git(remote, "show", "main:NOTES.md") == "a person's notes"
