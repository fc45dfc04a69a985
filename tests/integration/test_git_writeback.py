"""Status write-back against real git: a bare remote, a person's clone, the reconciler's clone.

The remote refuses non-fast-forward updates, so any force push by the reconciler would fail here.
"""

from __future__ import annotations

import base64
import os
import socket
import stat
import subprocess
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
import yaml

from klutch_gitops.config_file import defaults
from klutch_gitops.errors import KlutchError
from reconciler.git.checkout import Checkout
from reconciler.git.credentials import Credentials
from reconciler.git.remote import ls_remote
from reconciler.manifests import Identity, Rejection
from reconciler.sync.notes import NOTES_REF, note_reconciled
from reconciler.sync.writeback import (
    Mode,
    ObservedStatus,
    Summary,
    is_bot_commit,
    render_changes,
    source_commit,
    write_back,
)

BOT_AUTHOR = defaults().bot  # the reconciler's own identity
CLAIMS = """\
# Databases of the shop team.
apiVersion: anynines.com/v1
kind: PostgresqlInstance
metadata:
  name: orders   # orders DB
  namespace: shop
spec:
  service: "a9s-postgresql13"
  plan: 'postgresql-single-nano'
---
# The binding.
apiVersion: anynines.com/v1
kind: ServiceBinding
metadata: {name: orders-app, namespace: shop}
spec:
  instanceRef: orders
"""
ORDERS = Identity("anynines.com", "PostgresqlInstance", "shop", "orders")
BINDING = Identity("anynines.com", "ServiceBinding", "shop", "orders-app")
READY = {"phase": "Ready", "conditions": [{"type": "Ready", "status": "True"}]}
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
SECRET = "s3cret-t0ken-value"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=Human", "-c", "user.email=human@example.com", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No global git config, and a place to see whether anything stored credentials."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    return home


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "--quiet", "--bare", "-b", "main", str(bare)], check=True)
    git(bare, "config", "receive.denyNonFastForwards", "true")
    git(bare, "config", "receive.denyDeletes", "true")
    return bare


@pytest.fixture
def human(tmp_path: Path, remote: Path) -> Path:
    """A person's clone that has pushed the claims."""
    clone = tmp_path / "human"
    git(tmp_path, "clone", "--quiet", str(remote), str(clone))
    (clone / "apps").mkdir()
    (clone / "apps" / "claims.yaml").write_text(CLAIMS)
    (clone / "apps" / "broken.yaml").write_text("kind: [unclosed\n")
    (clone / "README.md").write_text("shop\n")
    git(clone, "add", ".")
    git(clone, "commit", "--quiet", "-m", "Add the shop's database")
    git(clone, "push", "--quiet", "origin", "HEAD:main")
    return clone


def human_push(clone: Path, file: str, text: str) -> str:
    git(clone, "pull", "--quiet", "--rebase", "origin", "main")
    (clone / file).write_text(text)
    git(clone, "add", file)
    git(clone, "commit", "--quiet", "-m", f"Edit {file}")
    git(clone, "push", "--quiet", "origin", "HEAD:main")
    return git(clone, "rev-parse", "HEAD")


def summary(source: str, **counts: int) -> Summary:
    return Summary(source, counts or {"claims": 2, "applied": 2}, [], "shop")


def statuses(status: dict | None = READY) -> list[ObservedStatus]:
    return [
        ObservedStatus(ORDERS, "anynines.com/v1", status),
        ObservedStatus(BINDING, "anynines.com/v1", {"phase": "Bound"}),
    ]


def show(remote: Path, ref: str, file: str) -> str:
    return git(remote, "show", f"{ref}:{file}") + "\n"


def test_inline_write_back_keeps_the_file_byte_for_byte(
    tmp_path: Path,
    remote: Path,
    human: Path,
) -> None:
    source = git(human, "rev-parse", "HEAD")
    checkout = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")
    assert checkout.head == source == ls_remote(str(remote), "main")

    gone = ObservedStatus(Identity("anynines.com", "Backup", "shop", "gone"), "anynines.com/v1", {})

    def changes(tree: Path) -> dict[str, bytes | None]:
        observed = [*statuses(), gone]  # a claim deleted meanwhile is skipped
        return render_changes(tree, "apps", Mode.INLINE, observed, summary(source), NOW)

    sha = write_back(checkout, changes, "Update status", source, BOT_AUTHOR)

    assert sha is not None
    assert ls_remote(str(remote), "main") == sha
    first, second = CLAIMS.split("---\n")
    assert show(remote, "main", "apps/claims.yaml") == (
        first + "status:\n  phase: Ready\n  conditions:\n  - type: Ready\n    status: 'True'\n"
        "---\n" + second + "status:\n  phase: Bound\n"
    )
    assert show(remote, "main", "apps/.klutch/reconcile.yaml") == (
        "# Written by klutch-gitops after each reconcile. Edits here are overwritten.\n"
        "registrations:\n  shop:\n    reconciledAt: '2025-01-02T03:04:05Z'\n"
        "    counts:\n      claims: 2\n      applied: 2\n    rejections: []\n"
    )
    assert git(remote, "log", "-1", "--format=%an <%ae>|%P", "main") == (
        f"klutch-gitops[bot] <klutch-gitops@users.noreply.klutch.example>|{source}"
    )
    assert checkout.trailers(sha) == {
        "Klutch-Source-Commit": [source],
        "Klutch-Reconciler": ["klutch-gitops"],
    }
    assert is_bot_commit(checkout, sha)
    assert not is_bot_commit(checkout, source)
    assert source_commit(checkout) == source  # a status commit is never a new source

    # Idle: nothing changed but the clock, so nothing is committed.
    later = NOW + timedelta(hours=1)
    assert (
        render_changes(checkout.root, "apps", Mode.INLINE, statuses(), summary(source), later) == {}
    )
    assert write_back(checkout, changes, "Update status", source, BOT_AUTHOR) is None
    assert ls_remote(str(remote), "main") == sha

    # Status gone: removed again, the person's text is back exactly.
    def cleared(tree: Path) -> dict[str, bytes | None]:
        gone = [ObservedStatus(s.identity, s.api_version, None) for s in statuses()]
        return render_changes(tree, "apps", Mode.INLINE, gone, summary(source), later)

    assert write_back(checkout, cleared, "Clear status", source, BOT_AUTHOR) is not None
    assert show(remote, "main", "apps/claims.yaml") == CLAIMS


def test_files_mode_writes_and_prunes_status_files(
    tmp_path: Path,
    remote: Path,
    human: Path,
) -> None:
    source = git(human, "rev-parse", "HEAD")
    checkout = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")
    rejection = Rejection("apps/bad.yaml", "spec.plan is required", "add spec.plan", 0, "spec.plan")
    report = Summary(source, {"claims": 3, "rejected": 1}, [rejection], "shop")

    def changes(tree: Path) -> dict[str, bytes | None]:
        return render_changes(tree, "./apps/", Mode.FILES, statuses(), report, NOW)

    assert write_back(checkout, changes, "Update status", source, BOT_AUTHOR) is not None
    assert show(remote, "main", "apps/.klutch/status/shop/PostgresqlInstance/orders.yaml") == (
        "# Written by klutch-gitops after each reconcile. Edits here are overwritten.\n"
        "apiVersion: anynines.com/v1\nkind: PostgresqlInstance\n"
        "metadata:\n  name: orders\n  namespace: shop\n"
        "status:\n  phase: Ready\n  conditions:\n  - type: Ready\n    status: 'True'\n"
    )
    written = show(remote, "main", "apps/.klutch/reconcile.yaml")
    rejection_entry = "- file: apps/bad.yaml\n      document: 0\n      field: spec.plan\n"
    assert f"rejections:\n    {rejection_entry}" in written
    assert show(remote, "main", "apps/claims.yaml") == CLAIMS

    def fewer(tree: Path) -> dict[str, bytes | None]:
        return render_changes(tree, "apps", Mode.FILES, statuses()[:1], report, NOW)

    assert fewer(checkout.root) == {"apps/.klutch/status/shop/ServiceBinding/orders-app.yaml": None}
    assert write_back(checkout, fewer, "Prune status", source, BOT_AUTHOR) is not None
    files = git(remote, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert files == [
        "README.md",
        "apps/.klutch/reconcile.yaml",
        "apps/.klutch/status/shop/PostgresqlInstance/orders.yaml",
        "apps/broken.yaml",
        "apps/claims.yaml",
    ]


def test_branch_mode_starts_an_orphan_branch(tmp_path: Path, remote: Path, human: Path) -> None:
    source = git(human, "rev-parse", "HEAD")
    checkout = Checkout.open_or_clone(str(remote), "klutch-status", tmp_path / "status")
    assert checkout.head is None
    assert list(checkout.root.iterdir()) == [checkout.root / ".git"]

    def changes(tree: Path) -> dict[str, bytes | None]:
        return render_changes(tree, "", Mode.BRANCH, statuses(), summary(source), NOW)

    sha = write_back(checkout, changes, "Update status", source, BOT_AUTHOR)

    assert sha is not None
    assert ls_remote(str(remote), "klutch-status") == sha
    assert git(remote, "rev-list", "--parents", "klutch-status") == sha  # a root commit
    assert git(remote, "ls-tree", "-r", "--name-only", "klutch-status").splitlines() == [
        ".klutch/reconcile.yaml",
        ".klutch/status/shop/PostgresqlInstance/orders.yaml",
        ".klutch/status/shop/ServiceBinding/orders-app.yaml",
    ]
    assert ls_remote(str(remote), "main") == source

    again = Checkout.open_or_clone(str(remote), "klutch-status", tmp_path / "status")
    assert again.head == sha
    assert source_commit(again) is None  # nothing but status commits on this branch
    assert write_back(again, changes, "Update status", source, BOT_AUTHOR) is None


def test_a_human_push_during_write_back_is_kept(
    tmp_path: Path,
    remote: Path,
    human: Path,
) -> None:
    source = git(human, "rev-parse", "HEAD")
    checkout = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")
    pushed: list[str] = []
    slept: list[float] = []

    def changes(tree: Path) -> dict[str, bytes | None]:
        if not pushed:  # someone pushes while the reconciler computes: its push is rejected
            pushed.append(human_push(human, "README.md", "shop, edited meanwhile\n"))
        return render_changes(tree, "apps", Mode.INLINE, statuses(), summary(source), NOW)

    sha = write_back(checkout, changes, "Update status", source, BOT_AUTHOR, sleep=slept.append)

    assert sha is not None
    assert ls_remote(str(remote), "main") == sha
    assert len(slept) == 1
    assert git(remote, "rev-list", "--parents", "-n", "1", sha) == f"{sha} {pushed[0]}"
    assert source_commit(checkout) == pushed[0]
    git(remote, "merge-base", "--is-ancestor", pushed[0], sha)
    assert show(remote, "main", "README.md") == "shop, edited meanwhile\n"
    assert "phase: Bound" in show(remote, "main", "apps/claims.yaml")


def test_gives_up_when_the_branch_keeps_moving(
    tmp_path: Path,
    remote: Path,
    human: Path,
) -> None:
    source = git(human, "rev-parse", "HEAD")
    checkout = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")
    slept: list[float] = []
    pushes: list[str] = []

    def changes(tree: Path) -> dict[str, bytes | None]:
        pushes.append(human_push(human, "README.md", f"edit {len(pushes)}\n"))
        return render_changes(tree, "apps", Mode.INLINE, statuses(), summary(source), NOW)

    with pytest.raises(KlutchError, match="rejected 3 times"):
        write_back(
            checkout, changes, "Update status", source, BOT_AUTHOR, attempts=3, sleep=slept.append
        )

    assert ls_remote(str(remote), "main") == pushes[-1]
    assert len(slept) == 2
    assert 0.25 <= slept[0] <= 0.75
    assert 0.5 <= slept[1] <= 1.5


def test_reuses_a_clone_and_recovers_from_leftovers(
    tmp_path: Path,
    remote: Path,
    human: Path,
) -> None:
    checkout = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")
    (checkout.root / "stray.txt").write_text("left by a crash\n")
    (checkout.root / "README.md").write_text("half-written\n")
    for lock in ("index.lock", "config.lock", "packed-refs.lock"):  # a SIGKILL mid-command
        (checkout.root / ".git" / lock).write_text("")
    newer = human_push(human, "README.md", "newer\n")

    again = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")

    assert again.head == newer
    assert not (again.root / "stray.txt").exists()
    assert (again.root / "README.md").read_text() == "newer\n"
    with pytest.raises(KlutchError, match="not empty and not a git clone"):
        Checkout.open_or_clone(str(remote), "main", human / "apps")


def test_empty_remote_and_missing_branch(tmp_path: Path, remote: Path) -> None:
    assert ls_remote(str(remote), "main") is None
    checkout = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")
    assert checkout.head is None
    assert source_commit(checkout) is None
    assert checkout.commit_files({}, "nothing", BOT_AUTHOR) is None

    sha = checkout.commit_files({"a/b.txt": b"x\n"}, "First", BOT_AUTHOR)

    assert sha is not None
    assert checkout.push()
    assert ls_remote(str(remote), "main") == sha
    assert checkout.commit_files({"a/b.txt": b"x\n"}, "Same", BOT_AUTHOR) is None
    assert checkout.commit_files({"a/missing.txt": None}, "Delete nothing", BOT_AUTHOR) is None
    with pytest.raises(ValueError, match="not a repository-relative"):
        checkout.commit_files({"../escape.txt": b"x"}, "Escape", BOT_AUTHOR)
    with pytest.raises(KlutchError):
        ls_remote(str(tmp_path / "nowhere.git"), "main")


def test_refuses_to_write_through_a_symlink(tmp_path: Path, remote: Path, human: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (human / ".klutch").symlink_to(outside)
    git(human, "add", ".klutch")
    git(human, "commit", "--quiet", "-m", "A symlink")
    git(human, "push", "--quiet", "origin", "HEAD:main")
    checkout = Checkout.open_or_clone(str(remote), "main", tmp_path / "work")

    with pytest.raises(KlutchError, match="symlink"):
        checkout.commit_files({".klutch/reconcile.yaml": b"x: 1\n"}, "Status", BOT_AUTHOR)
    assert list(outside.iterdir()) == []


class GitHttp:
    """git's smart HTTP protocol (``git http-backend``) behind HTTP basic authentication."""

    def __init__(self, root: Path, username: str, password: str) -> None:
        self.root = root
        self.username = username
        self.expected = "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()

    def __call__(self, environ, start_response):
        if environ.get("HTTP_AUTHORIZATION") != self.expected:
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="git"')])
            return [b""]
        body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        cgi = {
            name: environ.get(name, "")
            for name in (
                "PATH_INFO",
                "QUERY_STRING",
                "REQUEST_METHOD",
                "CONTENT_TYPE",
                "HTTP_CONTENT_ENCODING",
                "HTTP_GIT_PROTOCOL",
            )
        }
        cgi |= {
            "PATH": os.environ["PATH"],
            "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "REMOTE_USER": self.username,
            "CONTENT_LENGTH": str(len(body)),
        }
        out = subprocess.run(
            ["git", "http-backend"],
            input=body,
            env=cgi,
            capture_output=True,
            check=True,
            timeout=60,
        ).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        headers = [tuple(line.split(": ", 1)) for line in head.decode().split("\r\n")]
        status = next((v for k, v in headers if k.lower() == "status"), "200 OK")
        start_response(status, [(k, v) for k, v in headers if k.lower() != "status"])
        return [payload]


class QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https_like(tmp_path: Path, remote: Path, human: Path) -> Iterator[str]:
    """The remote over HTTP, where only user ``bot`` with the secret may read and push."""
    server = make_server(
        "127.0.0.1", 0, GitHttp(remote.parent, "bot", SECRET), handler_class=QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/{remote.name}"
    server.shutdown()
    thread.join()


def test_credentials_never_reach_config_remotes_commits_or_messages(
    tmp_path: Path,
    remote: Path,
    human: Path,
    https_like: str,
    isolated_home: Path,
) -> None:
    source = git(human, "rev-parse", "HEAD")
    credentials = Credentials(username="bot", password=SECRET)
    assert SECRET not in repr(credentials)
    assert ls_remote(https_like, "main", credentials) == source
    with_userinfo = https_like.replace("http://", f"http://bot:{SECRET}@")
    assert ls_remote(with_userinfo, "main") == source

    checkout = Checkout.open_or_clone(with_userinfo, "main", tmp_path / "work")
    sha = write_back(
        checkout,
        lambda tree: render_changes(tree, "apps", Mode.FILES, statuses(), summary(source), NOW),
        "Status",
        source,
        BOT_AUTHOR,
    )

    assert sha is not None
    assert ls_remote(https_like, "main", credentials) == sha
    assert checkout.url == https_like
    assert git(checkout.root, "remote", "get-url", "origin") == https_like
    assert SECRET not in git(checkout.root, "config", "--list", "--show-origin")
    for file in [*(checkout.root / ".git").rglob("*"), *isolated_home.rglob("*")]:
        assert not file.is_file() or SECRET.encode() not in file.read_bytes(), file
    assert SECRET not in git(remote, "log", "-p", "--all")

    wrong = with_userinfo.replace(SECRET, "wrong-" + SECRET)
    with pytest.raises(KlutchError) as refused:
        ls_remote(wrong, "main")
    assert SECRET not in str(refused.value)
    assert https_like in str(refused.value)


def test_credential_environment_keeps_secrets_out_of_argv(tmp_path: Path) -> None:
    key = tmp_path / "id_ed25519"
    env = Credentials(username="bot", password=SECRET, ssh_key_file=key).environment()
    assert env["KLUTCH_GIT_PASSWORD"] == SECRET
    assert SECRET not in env["GIT_ASKPASS"] + env["GIT_SSH_COMMAND"]
    ssh = env["GIT_SSH_COMMAND"]
    assert ssh.startswith("ssh -F /dev/null -o BatchMode=yes")
    assert f"-o IdentityFile={key}" in ssh
    # No known_hosts given: nothing is trusted on first use, nor learned into a shared file.
    assert "StrictHostKeyChecking=yes -o UserKnownHostsFile=/dev/null" in ssh
    helper = Path(env["GIT_ASKPASS"])
    assert stat.S_IMODE(helper.stat().st_mode) == 0o700
    assert stat.S_IMODE(helper.parent.stat().st_mode) == 0o700
    asked = subprocess.run(
        [helper, "Password for 'https://bot@example.com': "],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert asked.stdout == f"{SECRET}\n"
    known = tmp_path / "known_hosts"
    pinned = Credentials(ssh_key_file=key, known_hosts_file=known).environment()
    assert f"StrictHostKeyChecking=yes -o UserKnownHostsFile={known}" in pinned["GIT_SSH_COMMAND"]


def test_a_silent_server_times_out() -> None:
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"http://bot:{SECRET}@127.0.0.1:{silent.getsockname()[1]}/repo.git"
        with pytest.raises(KlutchError, match="did not complete in 1 secs") as timed_out:
            ls_remote(url, "main", timeout=1)
    assert SECRET not in str(timed_out.value)


def test_registrations_note_the_commit_they_reconciled_without_a_commit_on_the_branch(
    tmp_path: Path, remote: Path, human: Path
) -> None:
    source = git(human, "rev-parse", "HEAD")
    first = Checkout.open_or_clone(str(remote), "main", tmp_path / "first")
    second = Checkout.open_or_clone(str(remote), "main", tmp_path / "second")
    note_reconciled(first, source, "shop", NOW, BOT_AUTHOR)
    # another registration of the same repository adds its entry to the note, keeping ours
    note_reconciled(second, source, "shop-staging", NOW, BOT_AUTHOR, sleep=lambda _: None)
    note_reconciled(first, source, "shop", NOW, BOT_AUTHOR)  # already noted: nothing pushed
    assert ls_remote(str(remote), "main") == source  # no commit on the branch
    note = git(remote, "notes", f"--ref={NOTES_REF}", "show", source)
    assert note == "shop: '2025-01-02T03:04:05Z'\nshop-staging: '2025-01-02T03:04:05Z'"
    assert git(remote, "log", "-1", "--format=%an", NOTES_REF) == BOT_AUTHOR.name


RACING_NOTES = """#!/bin/sh
env -u GIT_QUARANTINE_PATH -u GIT_OBJECT_DIRECTORY -u GIT_ALTERNATE_OBJECT_DIRECTORIES \\
    git update-ref refs/notes/klutch-gitops "$(git rev-parse refs/racing/notes)"
rm -- "$0"
"""


def test_a_note_pushed_meanwhile_is_kept(tmp_path: Path, remote: Path, human: Path) -> None:
    source = git(human, "rev-parse", "HEAD")
    note_reconciled(
        Checkout.open_or_clone(str(remote), "main", tmp_path / "a"), source, "a", NOW, BOT_AUTHOR
    )
    # Another registration's note, pushed while ours is received: the remote's pre-receive hook
    # moves the notes ref under our push, which is then rejected ("is at X but expected Y").
    git(human, "fetch", "--quiet", "origin", f"+{NOTES_REF}:{NOTES_REF}")
    git(human, "notes", f"--ref={NOTES_REF}", "append", "-m", "c: '2025-01-02T03:04:05Z'", source)
    git(human, "push", "--quiet", "origin", f"{NOTES_REF}:refs/racing/notes")
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(RACING_NOTES)
    hook.chmod(0o755)
    slept: list[float] = []
    second = Checkout.open_or_clone(str(remote), "main", tmp_path / "b")
    note_reconciled(second, source, "b", NOW, BOT_AUTHOR, sleep=slept.append)
    assert len(slept) == 1  # rejected once, then added to the note pushed meanwhile
    note = yaml.safe_load(git(remote, "notes", f"--ref={NOTES_REF}", "show", source))
    assert sorted(note) == ["a", "b", "c"]
    assert ls_remote(str(remote), "main") == source
