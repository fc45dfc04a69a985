"""The reconciler's private clone of one branch: fetch, commit files, push without force."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Protocol

from klutch_gitops.errors import KlutchError
from klutch_gitops.urls import check_branch, url_transport
from reconciler.failpoints import failpoint
from reconciler.git.credentials import Credentials, separate
from reconciler.git.runner import DEFAULT_TIMEOUT, checked_branch, fix_for, run_git

# receive-pack's answer when another push updated the branch after ours was advertised
_MOVED_MEANWHILE = re.compile(r"cannot lock ref '[^']+': is at [0-9a-f]+ but expected [0-9a-f]+")


class Author(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def email(self) -> str: ...


def _who(author: Author) -> dict[str, str]:
    """The environment that makes ``author`` the author and committer of what git writes."""
    return {
        f"GIT_{role}_{part}": value
        for role in ("AUTHOR", "COMMITTER")
        for part, value in (("NAME", author.name), ("EMAIL", author.email))
    }


class Checkout:
    """A private clone of one branch. The reconciler owns it: nobody else commits in it, so
    resetting it to the remote at any time loses nothing."""

    def __init__(
        self, root: Path, url: str, branch: str, credentials: Credentials, timeout: float
    ) -> None:
        self.root = root
        self.url = url  # without credentials
        self.branch = checked_branch(branch)
        self._transport = url_transport(url)
        self._credentials = credentials
        self._timeout = timeout

    @classmethod
    def open_or_clone(
        cls,
        url: str,
        branch: str,
        directory: Path,
        credentials: Credentials | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ) -> Checkout:
        """Reuse the clone in ``directory`` or make one; either way, end at the remote's head.

        A branch the remote does not have yet (an empty repository, a new status branch) is
        checked out unborn; the first commit on it becomes a root commit.
        """
        url, credentials = separate(url, credentials)
        checkout = cls(Path(directory), url, branch, credentials, timeout)
        dot_git = checkout.root / ".git"
        if dot_git.is_dir():
            # A process killed in the middle of a git command leaves its locks behind.
            for lock in (
                dot_git / "index.lock",
                dot_git / "HEAD.lock",
                dot_git / "config.lock",
                dot_git / "packed-refs.lock",
                *dot_git.glob("refs/**/*.lock"),
            ):
                lock.unlink(missing_ok=True)
            checkout._run("remote", "set-url", "--", "origin", url)
        elif checkout.root.exists() and any(checkout.root.iterdir()):
            raise KlutchError(
                f"{checkout.root} is not empty and not a git clone",
                fix="remove the directory or point the reconciler at another one",
            )
        else:
            checkout.root.mkdir(parents=True, exist_ok=True)
            checkout._run("init", "--quiet", f"--initial-branch={branch}")
            checkout._run("remote", "add", "--", "origin", url)
        checkout.fetch()
        return checkout

    @property
    def credentials(self) -> Credentials:
        """What this clone authenticates with, for a poll of the same remote."""
        return self._credentials

    @property
    def head(self) -> str | None:
        status, out, _ = self._git("rev-parse", "--verify", "--quiet", "HEAD^{commit}")
        return out.strip() if status == 0 else None

    def fetch(self) -> str | None:
        """Fetch the branch and reset the work tree to it exactly; return the head."""
        tracking = f"refs/remotes/origin/{self.branch}"
        status, _, err = self._git(
            "fetch", "--quiet", "--no-tags", "origin", f"+refs/heads/{self.branch}:{tracking}"
        )
        if status == 0:
            self._run("checkout", "--quiet", "--force", "-B", self.branch, tracking, "--")
        elif "couldn't find remote ref" in err:
            self._run("update-ref", "-d", tracking)
            self._run("symbolic-ref", "HEAD", f"refs/heads/{self.branch}")
            self._run("update-ref", "-d", f"refs/heads/{self.branch}")
            self._run("read-tree", "--empty")
        else:
            raise self._error("fetch", err)
        self._run("clean", "-ffdxq")
        return self.head

    def fetch_ref(self, ref: str) -> str:
        """Fetch another ref of the remote (say, a pull request's head) into
        ``refs/klutch/...``, leaving branch and work tree alone; its commit."""
        if not ref.startswith("refs/") or check_branch(ref.removeprefix("refs/")):
            raise KlutchError(
                f"{ref!r} is not a ref git accepts", "name a ref such as refs/pull/1/head"
            )
        local = "refs/klutch/" + ref.removeprefix("refs/")
        status, _, err = self._git("fetch", "--quiet", "--no-tags", "origin", f"+{ref}:{local}")
        if status != 0:
            raise self._error("fetch", err)
        return self._run("rev-parse", "--verify", f"{local}^{{commit}}").strip()

    def commit_files(
        self, changes: Mapping[str, bytes | None], message: str, author: Author
    ) -> str | None:
        """Write (bytes) or delete (None) repository-relative files and commit them on HEAD.

        Returns the new commit, or None when the tree did not change. Plumbing commands keep
        hooks, signing and the user's git config out of the reconciler's commits.
        """
        for path, content in changes.items():
            target = self._target(path, deleting=content is None)
            if content is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
        if changes:
            with tempfile.TemporaryFile() as paths:
                paths.write(b"".join(p.encode() + b"\0" for p in changes))
                paths.seek(0)
                self._run("update-index", "--add", "--remove", "-z", "--stdin", stdin=paths)
        tree = self._run("write-tree").strip()
        parent = self.head
        if parent is None and not self._run("ls-files").strip():
            return None
        if parent is not None and tree == self._run("rev-parse", f"{parent}^{{tree}}").strip():
            return None
        sha = self._run(
            "commit-tree",
            "--no-gpg-sign",
            tree,
            *(["-p", parent] if parent else []),
            "-m",
            message,
            env=_who(author),
        ).strip()
        self._run("update-ref", "-m", "klutch-gitops: commit", "HEAD", sha, parent or "")
        return sha

    def push(self) -> bool:
        """Push HEAD to the branch, never forced. False when the remote moved on meanwhile:
        before the push (``[rejected]``), or while the server received it (a person's push won
        the race for the ref: ``[remote rejected]``, "is at X but expected Y")."""
        head = self.head
        if head is None:
            raise KlutchError(f"nothing to push to {self.url} {self.branch}")
        failpoint("git.before-push")
        pushed = self._push(f"{head}:refs/heads/{self.branch}")
        if pushed:
            failpoint("git.after-push")
        return pushed

    def _push(self, refspec: str) -> bool:
        """Push ``refspec`` without force; False when the remote ref moved meanwhile."""
        status, out, err = self._git("push", "--porcelain", "origin", refspec)
        if status == 0:
            return True
        rejected = any(line.startswith("!") and "[rejected]" in line for line in out.splitlines())
        if rejected or _MOVED_MEANWHILE.search(err):
            return False
        raise self._error("push", f"{err}\n{out}".strip())

    # -- notes: refs/notes/* beside the branch, whose pushes never race people's branch pushes

    def fetch_notes(self, ref: str) -> None:
        """Take the remote's notes ``ref`` as ours; none while the remote has none."""
        status, _, err = self._git(
            "fetch", "--quiet", "--no-write-fetch-head", "origin", f"+{ref}:{ref}"
        )
        if status == 0:
            return
        if "couldn't find remote ref" not in err:
            raise self._error("fetch", err)
        self._run("update-ref", "-d", ref)

    def note(self, ref: str, sha: str) -> str | None:
        """The note on ``sha`` under ``ref``, None without one."""
        status, out, _ = self._git("notes", "--ref", ref, "show", sha)
        return out if status == 0 else None

    def set_note(self, ref: str, sha: str, text: str, author: Author) -> None:
        self._run("notes", "--ref", ref, "add", "-f", "-m", text, sha, env=_who(author))

    def push_notes(self, ref: str) -> bool:
        """Push the notes ``ref``, never forced; False when someone noted meanwhile."""
        return self._push(f"{ref}:{ref}")

    def newest_commit(self, *, excluding: str) -> str | None:
        """The newest first-parent ancestor of HEAD (itself included) whose message has no line
        matching the regular expression ``excluding``."""
        if self.head is None:
            return None
        out = self._run(
            "log",
            "--first-parent",
            "-1",
            "--format=%H",
            "--invert-grep",
            f"--grep={excluding}",
            "HEAD",
            "--",
        )
        return out.strip() or None

    def changed_files(self, old: str, new: str, folder: str) -> list[str] | None:
        """The repository paths under ``folder`` ("." = all) that differ between two commits,
        a renamed file under both its names; None when git cannot tell (a commit it no longer
        has, say): the caller reads everything instead."""
        spec = [] if folder in ("", ".") else [f":(literal){folder}"]
        status, out, _ = self._git(
            "diff", "--no-renames", "--no-ext-diff", "--name-only", "-z", old, new, "--", *spec
        )
        if status != 0:
            return None
        return [name for name in out.split("\0") if name]

    def trailers(self, sha: str) -> dict[str, list[str]]:
        """The git trailers (``Key: value`` lines ending the message) of a commit."""
        out = self._run("log", "-1", "--format=%(trailers:only,unfold)", sha, "--")
        trailers: dict[str, list[str]] = {}
        for line in out.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                trailers.setdefault(key.strip(), []).append(value.strip())
        return trailers

    def _target(self, path: str, *, deleting: bool) -> Path:
        """The file for a repository-relative path; never outside the work tree or in .git."""
        parts = PurePosixPath(path).parts
        if not parts or PurePosixPath(path).is_absolute() or {".", "..", ".git"} & set(parts):
            raise ValueError(f"not a repository-relative file path: {path!r}")
        target = self.root.joinpath(*parts)
        # A symlink committed by someone could point anywhere; never write through one.
        checked = [target.parents[i] for i in range(len(parts) - 1)]
        if any(p.is_symlink() for p in [*checked, *([] if deleting else [target])]):
            raise KlutchError(
                f"refusing to write {path} in {self.url}: the path has a symlink",
                fix="replace the symlink in the repository with a directory or file",
            )
        return target

    def _git(
        self, *args: str, env: Mapping[str, str] | None = None, stdin: BinaryIO | None = None
    ) -> tuple[int, str, str]:
        return run_git(
            list(args),
            cwd=self.root,
            credentials=self._credentials,
            transport=self._transport,
            timeout=self._timeout,
            env=env,
            stdin=stdin,
        )

    def _run(
        self, *args: str, env: Mapping[str, str] | None = None, stdin: BinaryIO | None = None
    ) -> str:
        status, out, err = self._git(*args, env=env, stdin=stdin)
        if status != 0:
            raise self._error(args[0], err)
        return out

    def _error(self, command: str, err: str) -> KlutchError:
        return KlutchError(
            f"git {command} failed for {self.url} ({self.branch}) in {self.root}: "
            f"{self._credentials.redact(err).strip()}",
            fix=fix_for(
                err,
                "check the repository URL, the credentials and the network; "
                "deleting the working clone is safe, it is made again",
            ),
        )
