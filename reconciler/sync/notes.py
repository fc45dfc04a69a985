"""Which source commit a registration reconciled, as a git note that costs no commit on a branch.

A status commit for every push made people's next push fail as non-fast-forward (issue 15).
"This commit was reconciled" goes instead into a note on the source commit, under
``refs/notes/klutch-gitops``, pushed to the remote: a push of that ref never races anyone's
branch push. The note is a YAML mapping of registration name to when it reconciled the commit, so
registrations sharing a repository keep each other's entries; a rejected notes push (another
registration noted meanwhile) fetches theirs and adds ours again, never forced.

``git notes --ref=klutch-gitops show <sha>`` (after ``git fetch origin
refs/notes/klutch-gitops:refs/notes/klutch-gitops``) shows who reconciled a commit.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime

import yaml

from klutch_gitops.config import Bot
from klutch_gitops.errors import KlutchError
from klutch_gitops.git.checkout import Checkout
from klutch_gitops.git.runner import DEFAULT_TIMEOUT, run_git
from klutch_gitops.urls import url_transport

_log = logging.getLogger(__name__)

NOTES_REF = "refs/notes/klutch-gitops"


def note_reconciled(
    checkout: Checkout,
    sha: str,
    registration: str,
    when: datetime,
    bot: Bot,
    attempts: int = 5,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Add ``registration: when`` to the note on ``sha`` and push the notes ref, never forced;
    on a rejection fetch the remote's notes and add ours again."""
    for attempt in range(attempts):
        if attempt:
            sleep(min(5.0, 0.2 * 2**attempt))
        _fetch_notes(checkout)
        entries = dict(_entries(_git(checkout, "notes", "--ref", NOTES_REF, "show", sha)))
        if registration in entries:
            return  # noted already (say, before a restart): nothing to push
        entries[registration] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        text = yaml.safe_dump(dict(sorted(entries.items())), default_flow_style=False)
        who = {
            f"GIT_{role}_{part}": value
            for role in ("AUTHOR", "COMMITTER")
            for part, value in (("NAME", bot.name), ("EMAIL", bot.email))
        }
        status, _, err = _git(
            checkout, "notes", "--ref", NOTES_REF, "add", "-f", "-m", text, sha, env=who
        )
        if status != 0:
            raise KlutchError(
                f"git notes add failed in {checkout.root}: {err.strip()}",
                fix="deleting the working clone is safe, it is made again",
            )
        refspec = f"{NOTES_REF}:{NOTES_REF}"
        status, out, err = _git(checkout, "push", "--porcelain", "origin", refspec)
        if status == 0:
            return
        if "[rejected]" not in out and "but expected" not in err:
            raise KlutchError(
                f"pushing {NOTES_REF} to {checkout.url} failed: {err.strip()}",
                fix="check that the credentials may push refs/notes/*; the next pass tries again",
            )
        _log.info("notes push to %s rejected, someone noted meanwhile; retrying", checkout.url)
    raise KlutchError(
        f"{NOTES_REF} push to {checkout.url} was rejected {attempts} times",
        fix="nothing is lost; the next reconcile tries again",
    )


def _fetch_notes(checkout: Checkout) -> None:
    """Take the remote's notes ref as ours (ours holds nothing the remote lacks once pushed)."""
    status, _, err = _git(
        checkout, "fetch", "--quiet", "--no-write-fetch-head", "origin", f"+{NOTES_REF}:{NOTES_REF}"
    )
    if status == 0:
        return
    if "couldn't find remote ref" not in err:
        raise KlutchError(
            f"git fetch {NOTES_REF} from {checkout.url} failed: {err.strip()}",
            fix="check the repository URL, the credentials and the network",
        )
    _git(checkout, "update-ref", "-d", NOTES_REF)  # nothing noted on the remote yet


def _entries(result: tuple[int, str, str]) -> Mapping[str, str]:
    """The note's registration → time entries; none when there is no note or it is not ours."""
    status, out, _ = result
    try:
        data = yaml.safe_load(out) if status == 0 else None
    except yaml.YAMLError:
        return {}
    if not isinstance(data, Mapping):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def _git(
    checkout: Checkout, *args: str, env: Mapping[str, str] | None = None
) -> tuple[int, str, str]:
    return run_git(
        list(args),
        cwd=checkout.root,
        credentials=checkout.credentials,
        transport=url_transport(checkout.url),
        timeout=DEFAULT_TIMEOUT,
        env=env,
    )
