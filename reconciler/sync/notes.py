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
from reconciler.git.checkout import Checkout

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
        checkout.fetch_notes(NOTES_REF)
        entries = dict(_entries(checkout.note(NOTES_REF, sha)))
        if registration in entries:
            return  # noted already (say, before a restart): nothing to push
        entries[registration] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
        text = yaml.safe_dump(dict(sorted(entries.items())), default_flow_style=False)
        checkout.set_note(NOTES_REF, sha, text, bot)
        if checkout.push_notes(NOTES_REF):
            return
        _log.info("notes push to %s rejected, someone noted meanwhile; retrying", checkout.url)
    raise KlutchError(
        f"{NOTES_REF} push to {checkout.url} was rejected {attempts} times",
        fix="nothing is lost; the next reconcile tries again",
    )


def _entries(note: str | None) -> Mapping[str, str]:
    """The note's registration → time entries; none when there is no note or it is not ours."""
    try:
        data = yaml.safe_load(note) if note is not None else None
    except yaml.YAMLError:
        return {}
    if not isinstance(data, Mapping):
        return {}
    return {str(k): str(v) for k, v in data.items()}
