"""A plan as a pull-request comment (Markdown) or for machines (JSON). Pure functions.

The Markdown fits one comment (GitHub's limit is 65,536 characters): failures come first, then
each binding's changes in plan order; a diff longer than ``FOLD_LINES`` is folded in
``<details>``. When everything does not fit, each entry in turn gets the room that is left, its
diff shortened (or left out) before the entry is dropped; from the first entry that does not fit
at all, the rest is counted in a note that says how to get the whole plan.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.review.plan import (
    ABSENT,
    Action,
    BindingPlan,
    Change,
    Failure,
    FieldChange,
    Outcome,
    Plan,
)

MAX_COMMENT = 65_536
FOLD_LINES = 10  # longer diffs are folded
MAX_DIFF_LINES = 400  # of one change; the rest is counted
MAX_VALUE = 300  # characters of one value in a diff line
MAX_MESSAGE = 1_000  # characters of one message
_ICONS = {Action.CREATE: "🆕", Action.CHANGE: "✏️", Action.DELETE: "🗑️"}
_CHECK_ICONS = {Outcome.PASSED: "✅", Outcome.FAILED: "❌", Outcome.SKIPPED: "⏭️"}
_TRUNCATION_ROOM = 400  # kept free for the note that says what was left out


def render_json(plan: Plan) -> str:
    return json.dumps(plan_dict(plan), indent=2, ensure_ascii=False, default=str) + "\n"


def plan_dict(plan: Plan) -> dict[str, Any]:
    """The whole plan as JSON-ready data; nothing is left out."""
    return {
        "result": "failed" if plan.exit_code else "clean",
        "base": {"ref": plan.base_ref, "commit": plan.base},
        "head": {"ref": plan.head_ref, "commit": plan.head},
        "mergeTree": plan.merge,
        "counts": plan.counts(),
        "failures": [_failure_dict(f) for f in plan.failures()],
        "bindings": [_binding_dict(b) for b in plan.bindings],
    }


def _failure_dict(failure: Failure) -> dict[str, str]:
    return {
        "binding": failure.binding,
        "subject": failure.subject,
        "message": failure.message,
        "fix": failure.fix,
    }


def _binding_dict(binding: BindingPlan) -> dict[str, Any]:
    return {
        "name": binding.name,
        "path": binding.path,
        "notes": list(binding.notes),
        "changes": [_change_dict(c) for c in binding.changes],
        "refused": [r.as_dict() for r in binding.refused],
        "stillRefused": [r.as_dict() for r in binding.still_refused],
        "held": [
            {"object": str(h.identity), "file": h.file, "reason": h.reason} for h in binding.held
        ],
    }


def _change_dict(change: Change) -> dict[str, Any]:
    ident = change.identity
    return {
        "action": change.action.value,
        "object": str(ident),
        "apiVersion": change.api_version,
        "kind": ident.kind,
        "namespace": ident.namespace,
        "name": ident.name,
        "file": change.file,
        "destructive": change.destructive,
        "fields": [_field_dict(f) for f in change.fields],
        "checks": [
            {
                "name": c.name,
                "outcome": c.outcome.value,
                **({"message": c.message} if c.message else {}),
            }
            for c in change.checks
        ],
    }


def _field_dict(field: FieldChange) -> dict[str, Any]:
    found: dict[str, Any] = {"path": field.path, "op": field.op}
    if field.old is not ABSENT:
        found["old"] = field.old
    if field.new is not ABSENT:
        found["new"] = field.new
    return found


@dataclass(frozen=True)
class _Block:
    """One entry of the comment: text, and for a change its diff, which may be shortened."""

    kind: str  # "failure", "change" or "other": what the truncation note counts
    text: str
    diff: tuple[str, ...] = ()

    def render(self, lines: int | None = None) -> str:
        """With the first ``lines`` lines of the diff (all by default, up to MAX_DIFF_LINES)."""
        if not self.diff:
            return self.text
        count = min(len(self.diff), MAX_DIFF_LINES if lines is None else lines)
        if count == 0:
            return f"{self.text}\n_Diff of {len(self.diff)} line(s) left out to fit one comment._\n"
        shown = list(self.diff[:count])
        if count < len(self.diff):
            shown.append(f"… {len(self.diff) - count} more line(s): see `-o json`")
        body = _fenced("diff", shown)
        if len(self.diff) <= FOLD_LINES:
            return f"{self.text}\n{body}"
        summary = f"diff: {len(self.diff)} line(s)"
        return f"{self.text}\n<details><summary>{summary}</summary>\n\n{body}\n</details>\n"

    def fit(self, room: int) -> str | None:
        """The longest rendering within ``room`` characters, shortening only the diff."""
        full = self.render()
        if len(full) <= room:
            return full
        if not self.diff or len(self.render(0)) > room:
            return None
        low, high = 0, min(len(self.diff), MAX_DIFF_LINES)  # render(low) fits, render(high) not
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if len(self.render(middle)) <= room else (low, middle)
        return self.render(low)


def render_markdown(plan: Plan, limit: int = MAX_COMMENT) -> str:
    """The plan as one pull-request comment of at most ``limit`` characters."""
    head = _header(plan)
    blocks = [*_failure_blocks(plan), *_binding_blocks(plan)]
    text = head + "".join(b.render() for b in blocks)
    if len(text) <= limit:
        return text
    room = limit - _TRUNCATION_ROOM
    parts, used = [head], len(head)
    for index, block in enumerate(blocks):
        chosen = block.fit(room - used)
        if chosen is None:
            parts.append(_truncation_note(blocks[index:], plan))
            break
        parts.append(chosen)
        used += len(chosen)
    else:
        parts.append(
            "\n> ⚠️ Some diffs are shortened to fit one comment; `klutch-gitops plan -o json` "
            "has all of them.\n"
        )
    return "".join(parts)


def _header(plan: Plan) -> str:
    counts = plan.counts()
    verdict = (
        f"❌ {counts['failures']} failure{'s' * (counts['failures'] != 1)}"
        if counts["failures"]
        else "✅ clean"
    )
    summary = (
        ", ".join(f"{counts[a.value]} to {a.value}" for a in Action if counts[a.value])
        or "no changes to claims"
    )
    if counts["destructive"]:
        summary += f" — **{counts['destructive']} destructive**"
    return (
        f"## klutch-gitops plan: {verdict}\n\n"
        f"Merging {_ref(plan.head_ref, plan.head)} into {_ref(plan.base_ref, plan.base)}: "
        f"{summary}.\n"
    )


def _ref(name: str, commit: str) -> str:
    short = _code(commit[:12])
    return f"{_code(name)} ({short})" if name and name != commit else short


def _failure_blocks(plan: Plan) -> list[_Block]:
    failures = plan.failures()
    if not failures:
        return []
    blocks = [_Block("other", "\n### ❌ Failures\n\n")]
    for failure in failures:
        binding = f" (binding {_code(failure.binding)})" if len(plan.bindings) > 1 else ""
        blocks.append(
            _Block(
                "failure",
                f"- **{_text(failure.subject)}**{binding}: {_text(failure.message)}\n"
                f"  _Fix:_ {_text(failure.fix)}\n",
            )
        )
    return blocks


def _binding_blocks(plan: Plan) -> list[_Block]:
    blocks = []
    for binding in plan.bindings:
        notes = "".join(f"_{_text(note)}_\n" for note in binding.notes)
        title = _code(binding.path)
        if binding.name != binding.path:
            title = f"{_text(binding.name)} · {title}"
        blocks.append(_Block("other", f"\n### {title}\n\n{notes}"))
        if not binding.changes:
            blocks.append(_Block("other", "\nNo claims change.\n"))
        blocks += [_change_block(change) for change in binding.changes]
        if binding.held:
            blocks.append(_Block("other", "\n**Not deleted** (held by a refused document):\n"))
            blocks += [
                _Block(
                    "other", f"- {_code(str(h.identity))} in {_code(h.file)}: {_text(h.reason)}\n"
                )
                for h in binding.held
            ]
        if binding.still_refused:
            blocks.append(
                _Block("other", "\nAlready refused on the base (not counted as failures):\n")
            )
            blocks += [
                _Block("other", f"- {_code(r.file)}: {_text(r.message)}\n")
                for r in binding.still_refused
            ]
    return blocks


def _change_block(change: Change) -> _Block:
    failed = "❌ " if change.failed else ""
    title = (
        f"\n{failed}{_ICONS[change.action]} **{change.action.value}** "
        f"{_code(str(change.identity))} · {_code(change.file)}"
    )
    if change.destructive:
        title += f" — ⚠️ **destructive**: {_text(change.destructive)}"
    checks = "".join(
        f"- {_CHECK_ICONS[c.outcome]} {c.name}"
        + (f": {_text(c.message)}" if c.message else "")
        + "\n"
        for c in change.checks
        if c.outcome is not Outcome.PASSED or c.message
    )
    text = f"{title}\n\n{checks}" if checks else f"{title}\n"
    return _Block("change", text, tuple(diff_lines(change.fields)))


def diff_lines(fields: Iterable[FieldChange]) -> list[str]:
    """``- path: old`` / ``+ path: new`` lines, values as JSON."""
    lines = []
    for field in fields:
        if field.old is not ABSENT:
            lines.append(f"- {field.path}: {_value(field.old)}")
        if field.new is not ABSENT:
            lines.append(f"+ {field.path}: {_value(field.new)}")
    return lines


def _value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= MAX_VALUE else text[: MAX_VALUE - 1] + "…"


def _fenced(language: str, lines: list[str]) -> str:
    """A code block; every line starts with ``+``, ``-`` or ``…``, so none can close it."""
    return f"```{language}\n" + "\n".join(lines) + "\n```\n"


def _code(text: str) -> str:
    """An inline code span that holds any text on one line."""
    text = " ".join(text.split()) or " "
    longest = max(map(len, re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    return f"{ticks} {text} {ticks}" if longest else f"`{text}`"


def _text(text: str) -> str:
    """Prose from outside (messages, names): one line, bounded, no HTML."""
    text = " ".join(text.split())
    if len(text) > MAX_MESSAGE:
        text = text[: MAX_MESSAGE - 1] + "…"
    return html.escape(text, quote=False)


def _truncation_note(left: Sequence[_Block], plan: Plan) -> str:
    changes = sum(b.kind == "change" for b in left)
    failures = sum(b.kind == "failure" for b in left)
    what = (
        ", ".join(
            f"{n} {label}" for n, label in ((failures, "failure(s)"), (changes, "change(s)")) if n
        )
        or "the rest"
    )
    return (
        f"\n> ⚠️ **Truncated**: the plan is too long for one comment; {what} not shown "
        f"({plan.counts()['failures']} failure(s) in all). Run `klutch-gitops plan -o json` "
        "for the whole plan.\n"
    )
