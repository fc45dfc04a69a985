"""Reading a repository that is already on disk (``klutch-gitops plan --repo``): commits, the tree
Git's own merge would produce, a tree's files, the remotes.

Local commands only: no transport at all (an empty ``GIT_ALLOW_PROTOCOL``), so no remote helper
that a repository's config or content could name; no credentials.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from klutch_gitops.errors import KlutchError
from reconciler.git.credentials import Credentials
from reconciler.git.runner import DEFAULT_TIMEOUT, GitFailed, run_git

_NO_TRANSPORT = ""


class LocalRepository:
    """A repository on disk, read without touching its index, work tree or refs."""

    def __init__(self, root: Path, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.root = root
        self._timeout = timeout

    def check(self) -> None:
        """Raise GitFailed (git's message) when ``root`` is not in a Git repository."""
        self._run("rev-parse", "--git-dir")

    def commit(self, ref: str) -> str:
        """The commit ``ref`` (a branch, tag or commit) names."""
        try:
            return self._run(
                "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}"
            ).strip()
        except GitFailed as error:
            raise KlutchError(
                f"{ref!r} is not a commit in {self.root}: {error.message}",
                "fetch the branch first, or pass a branch, tag or commit that the repository has",
            ) from None

    def merge_tree(self, base: str, head: str) -> str:
        """The tree of merging ``head`` into ``base``; conflicts are an error (no plan to make)."""
        try:
            return self._run("merge-tree", "--write-tree", "--name-only", base, head).split()[0]
        except GitFailed as error:
            if error.status == 1:  # conflicts: the tree, the conflicted files, then messages
                files = dict.fromkeys(error.out.split("\n\n")[0].splitlines()[1:])
                raise KlutchError(
                    f"merging {head[:12]} into {base[:12]} conflicts in: {', '.join(files)}",
                    "rebase the branch on its base (or merge the base into it) and plan again",
                ) from None
            raise KlutchError(
                f"cannot merge {head[:12]} into {base[:12]}: {error.message}",
                "git >= 2.38 is needed (merge-tree --write-tree), and both commits must share "
                "history",
            ) from None

    def write_tree(self, tree: str, into: Path) -> Path:
        """The files of ``tree`` in ``into``, written by git (which never writes through a
        symlink), through a private index: the repository's own index and work tree stay
        untouched."""
        into.mkdir(parents=True)
        env = {"GIT_INDEX_FILE": str(into.parent / f"{into.name}.index")}
        self._run("read-tree", tree, env=env)
        self._run(f"--work-tree={into}", "checkout-index", "--all", env=env)
        return into

    def remote_urls(self) -> list[str]:
        """The URLs of every remote (fetch and push); none when git cannot list them."""
        try:
            return [line.split()[1] for line in self._run("remote", "-v").splitlines()]
        except GitFailed:
            return []

    def _run(self, *args: str, env: Mapping[str, str] | None = None) -> str:
        status, out, err = run_git(
            ["-C", str(self.root), *args],  # git's own message for a folder that is not there
            cwd=None,
            credentials=Credentials(),
            transport=_NO_TRANSPORT,
            timeout=self._timeout,
            env=env,
        )
        if status != 0:
            raise GitFailed(args[0], status, out, err)
        return out
