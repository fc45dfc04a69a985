"""Status write-back: what the reconciler tells a repository, committed without harm to anyone.

Git holds spec and clusters hold status; status reaches Git only here, as bot commits on top of
whatever people pushed. A push is never forced: when someone pushed meanwhile, the changes are
computed again on their tree and committed on top, so no human commit is lost or rewritten.

A status commit is made only when a claim's observed status or the refusals (and the counts that
follow from them) change: a push that changes nothing observable costs no commit on the branch,
so people's next push is not rejected as non-fast-forward (issue 15). ``.klutch/reconcile.yaml``
therefore holds no source commit; which commit was reconciled is on the RepositoryBinding status
(``lastAppliedCommit``) and in a git note on that commit (``reconciler/sync/notes.py``). A
status commit still names its source commit in the ``Klutch-Source-Commit`` trailer. The report
keeps one entry per registration (``registrations: {name: ...}``) and each write-back changes
only its own, so registrations sharing a repository, branch and path keep each other's.

``Schedule`` decides when a repository's passes need a write-back at all: only when what a pass
observed changed or a new source commit is still to be noted, and then only the statuses Git
does not hold already.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from ruamel.yaml.error import YAMLError

from klutch_gitops.config import Bot
from klutch_gitops.errors import KlutchError
from klutch_gitops.yamlsafe import YamlError, load_documents
from reconciler.git.checkout import Checkout
from reconciler.manifests import Identity
from reconciler.sync.desired import DesiredState, Limits
from reconciler.sync.notes import note_reconciled
from reconciler.sync.outcome import Found, Held, only
from reconciler.sync.report import HEADER, Summary, render_report
from reconciler.yamledit import dump, set_status

_log = logging.getLogger(__name__)

RECONCILER = "klutch-gitops"
TRAILER_SOURCE = "Klutch-Source-Commit"
TRAILER_RECONCILER = "Klutch-Reconciler"
_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Mode(StrEnum):
    INLINE = "inline"  # status inside the claim's own document
    FILES = "files"  # status in <path>/.klutch/status/, beside the claims
    BRANCH = "branch"  # the FILES layout, on a branch of its own


@dataclass(frozen=True)
class ObservedStatus:
    identity: Identity
    api_version: str
    status: Mapping[str, Any] | None  # None = no status observed yet
    file: str | None = None  # where the claim was last seen: looked at first, before a scan
    document: int | None = None  # its index in ``file``: another definition there is not it


@dataclass(frozen=True)
class Report:
    """What the next write-back commits."""

    statuses: tuple[ObservedStatus, ...]
    summary: Summary


def git_holds(observed: ObservedStatus, in_git: Mapping[str, Any] | None) -> bool:
    """Whether Git already holds the observed status (``in_git``): nothing to write for it."""
    return observed.status == in_git


class Schedule:
    """The write-back of one registration: what the next one commits, and whether a pass changed
    it. Passes run often; a write-back is asked for only when what they observed changed or
    their source commit is not noted yet."""

    def __init__(self, mode: Mode, registration: str) -> None:
        self.mode = mode
        self.registration = registration
        self.report: Report | None = None
        self._fingerprint = ""
        self._written = ""  # the fingerprint of what the last write-back left in Git
        self._noted = ""  # the source commit last noted as reconciled
        self._source: tuple[str | None, str] = (None, "")

    def source(self, head: str | None, reader: Checkout) -> str:
        """The newest human commit, not the head: the head moves with our own status commits."""
        if self._source[0] != head:
            self._source = (head, source_commit(reader) or head or "")
        return self._source[1]

    def plan(
        self,
        desired: DesiredState,
        statuses: tuple[ObservedStatus, ...],
        found: Sequence[Found],
        source: str,
    ) -> bool:
        """Keep what the next write-back commits; True when a write-back must be scheduled:
        what was observed changed, or ``source`` is still to be noted."""
        summary = Summary(
            source_commit=source,
            rejections=(*desired.rejections, *found),
            counts={
                "claims": len(desired.claims),
                "rejected": len(desired.rejections),
                "problems": len(found),
                "ready": sum(1 for s in statuses if _ready(s.status)),
                # App objects being deleted that our finalizer holds (deletion-protected)
                "held": len({held.identity for held in only(Held, found)}),
            },
            registration=self.registration,
        )
        if self.mode is Mode.INLINE:
            # the files hold a status already: only what differs needs their parsing and editing,
            # and a status someone removed from a file changes the fingerprint: it is written again
            in_git = {c.identity: c.git_status for c in desired.claims}
            statuses = tuple(s for s in statuses if not git_holds(s, in_git.get(s.identity)))
        fingerprint = _fingerprint(statuses, summary)
        self.report = Report(statuses, summary)
        changed, self._fingerprint = fingerprint != self._fingerprint, fingerprint
        return changed or (bool(source) and source != self._noted)

    def commit(self, writer: Checkout, reader: Checkout, path: str, bot: Bot) -> str | None:
        """Commit what the last pass observed, when it changed (nothing when Git already says
        it), then note its source commit as reconciled."""
        if self.report is None:
            return None
        statuses, summary = self.report.statuses, self.report.summary
        fingerprint, sha = self._fingerprint, None
        if fingerprint != self._written:
            writer.fetch()
            now = datetime.now(UTC)
            sha = write_back(
                writer,
                lambda tree: render_changes(tree, path, self.mode, statuses, summary, now),
                message=f"klutch-gitops: status of {summary.counts['claims']} claim(s) in {path}",
                source_commit=summary.source_commit,
                bot=bot,
            )
            self._written = fingerprint
        source = summary.source_commit
        if source and source != self._noted:
            note_reconciled(reader, source, self.registration, datetime.now(UTC), bot)
            self._noted = source
        return sha


def _fingerprint(statuses: Sequence[ObservedStatus], summary: Summary) -> str:
    """What a status commit would report: never the source commit, which every push changes."""
    return hashlib.sha256(
        json.dumps(
            [[str(s.identity), s.status] for s in statuses]
            + [r.as_dict() for r in summary.rejections]
            + [summary.counts],
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()


def _ready(status: Mapping[str, Any] | None) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (status or {}).get("conditions") or []
    )


def render_changes(
    tree: Path,
    path: str,
    mode: Mode,
    statuses: Sequence[ObservedStatus],
    summary: Summary,
    now: datetime,
) -> dict[str, bytes | None]:
    """The repository-relative files to write (bytes) or delete (None) so that ``tree`` reports
    ``statuses`` and ``summary``; only files whose content would actually change."""
    base = _normalise(path)
    if mode is Mode.INLINE:
        changes = _inline(tree, base, statuses)
    else:
        changes = _status_files(tree, base, statuses)
    report = _join(base, ".klutch/reconcile.yaml")
    changes[report] = render_report(_read(tree / report), summary, now)
    return {file: content for file, content in changes.items() if _read(tree / file) != content}


def write_back(
    checkout: Checkout,
    changes_for: Callable[[Path], Mapping[str, bytes | None]],
    message: str,
    source_commit: str,
    bot: Bot,
    attempts: int = 5,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Commit ``changes_for(work tree)`` on the current head as the bot and push it, never forced.

    When the push is rejected because someone pushed meanwhile, fetch their commits, compute the
    changes again on the new tree and retry, with exponential back-off. Returns the pushed commit,
    or None when there was nothing to change.
    """
    message = (
        f"{message.rstrip()}\n\n{TRAILER_SOURCE}: {source_commit}\n"
        f"{TRAILER_RECONCILER}: {RECONCILER}"
    )
    for attempt in range(attempts):
        if attempt:
            sleep(min(30.0, 0.5 * 2 ** (attempt - 1)) * random.uniform(0.5, 1.5))  # noqa: S311
            checkout.fetch()
        changes = changes_for(checkout.root)
        sha = checkout.commit_files(changes, message, bot) if changes else None
        if sha is None:
            return None
        if checkout.push():
            return sha
        _log.info(
            "status push to %s %s rejected, someone pushed meanwhile; retrying",
            checkout.url,
            checkout.branch,
        )
    raise KlutchError(
        f"status write-back to {checkout.url} ({checkout.branch}) was rejected {attempts} times "
        "because the branch kept moving",
        fix="nothing is lost; the next reconcile tries again. If this persists, use the "
        "'branch' write-back mode so that status commits do not race people's pushes",
    )


def is_bot_commit(checkout: Checkout, sha: str) -> bool:
    """Whether a commit is a status commit of the reconciler: it must not trigger a reconcile."""
    return RECONCILER in checkout.trailers(sha).get(TRAILER_RECONCILER, [])


def source_commit(checkout: Checkout) -> str | None:
    """The newest commit on the branch that is not a status commit: where the tree's spec comes
    from. Reporting a status commit as the source would make each status commit need another."""
    return checkout.newest_commit(excluding=f"^{TRAILER_RECONCILER}: {RECONCILER}$")


def _inline(tree: Path, base: str, statuses: Sequence[ObservedStatus]) -> dict[str, bytes | None]:
    """Claims are found, and their status compared, as the desired-state loader reads them (YAML
    1.1, within its limits), so that each claim it accepted is found where it found it, and a
    file it refuses, however large or hostile, is passed over at the same small cost."""
    pending = {observed.identity: observed for observed in statuses}
    changes: dict[str, bytes | None] = {}
    hinted = {o.file for o in statuses if o.file and (tree / o.file).is_file()}
    limits = Limits()
    # the claims' own files first: the full scan is only for claims that moved since
    for file in [*sorted(hinted), *(f for f in _yaml_files(tree, base) if f not in hinted)]:
        if not pending:
            break
        try:
            if (tree / file).stat().st_size > limits.max_file_bytes:
                continue
            text = (tree / file).read_bytes().decode()
            documents = load_documents(text, limits)
        except (OSError, UnicodeDecodeError, YamlError):
            continue  # the loader reports bad files; there is no status to write into them
        edited = text
        for document in documents:
            value = document.value
            identity = Identity.of(value) if isinstance(value, Mapping) else None
            observed = pending.get(identity) if identity else None
            if observed is None or _another_definition(observed, file, document.index):
                continue
            del pending[observed.identity]
            if git_holds(observed, _git_status(value)):
                continue
            try:
                edited = set_status(edited, document.index, observed.status)
            except (ValueError, YAMLError) as error:
                _log.warning("status of %s not written into %s: %s", identity, file, error)
        if edited != text:
            changes[file] = edited.encode()
    return changes


def _another_definition(observed: ObservedStatus, file: str, index: int) -> bool:
    """Whether the document at ``file``/``index`` defines the claim too but is not the one the
    loader took (that one refused, say, before it in the same file)."""
    return observed.document is not None and observed.file == file and observed.document != index


def _git_status(document: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The status the loader reports for a claim (``Claim.git_status``): a mapping, or None."""
    status = document.get("status")
    return status if isinstance(status, Mapping) else None


def _status_files(
    tree: Path, base: str, statuses: Sequence[ObservedStatus]
) -> dict[str, bytes | None]:
    root = _join(base, ".klutch/status")
    changes: dict[str, bytes | None] = dict.fromkeys(_files(tree, root))  # stale unless rewritten
    for observed in statuses:
        identity = observed.identity
        metadata = {"name": identity.name, "namespace": identity.namespace or None}
        doc: dict[str, Any] = {
            "apiVersion": observed.api_version,
            "kind": identity.kind,
            "metadata": {k: v for k, v in metadata.items() if v is not None},
        }
        if observed.status is not None:
            doc["status"] = observed.status
        file = "/".join(
            (root, *map(_segment, (identity.namespace or "_cluster", identity.kind, identity.name)))
        )
        changes[f"{file}.yaml"] = (HEADER + dump(doc)).encode()
    return changes


def _yaml_files(tree: Path, base: str) -> list[str]:
    return [
        f for f in _files(tree, base, skip=(".git", ".klutch")) if f.endswith((".yaml", ".yml"))
    ]


def _files(tree: Path, base: str, skip: tuple[str, ...] = ()) -> list[str]:
    """Repository-relative regular files under ``base``, sorted; symlinks are not followed."""
    if (tree / base).resolve() != tree.resolve().joinpath(base):
        return []  # base is, or lies under, a symlink
    found = []
    for directory, subdirs, names in os.walk(tree / base):
        subdirs[:] = sorted(d for d in subdirs if d not in skip)
        rel = Path(directory).relative_to(tree).as_posix()
        found += [
            _join("" if rel == "." else rel, n)
            for n in names
            if not (Path(directory) / n).is_symlink()
        ]
    return sorted(found)


def _read(file: Path) -> bytes | None:
    return file.read_bytes() if file.is_file() and not file.is_symlink() else None


def _normalise(path: str) -> str:
    parts = [p for p in PurePosixPath(path).parts if p not in ("/", ".")]
    if ".." in parts:
        raise ValueError(f"path {path!r} leaves the repository")
    return "/".join(parts)


def _join(base: str, rel: str) -> str:
    return f"{base}/{rel}" if base else rel


def _segment(name: str) -> str:
    if not _SEGMENT.fullmatch(name):
        raise ValueError(f"{name!r} cannot name a status file")
    return name
