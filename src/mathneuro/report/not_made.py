"""Comparisons the paired report did not make, each with its reason, so that none goes unseen.

Every note of :func:`mathneuro.report.paired.paired_report` is a :class:`NotMade`: the line a reader sees
(a ``str``) and a short ``reason`` (:data:`REASONS`). The sweep's end line counts them by reason
(:func:`count_text`); the console report and ``mathneuro-report`` list them, and ``summary.md`` ends with them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

PROMPTS_DIFFER = "prompts differ"
NO_BASELINE = "no baseline"
NO_REFERENCE = "no reference point"
NO_RECORDS = "no per-example records"
NO_SHARED = "no shared examples"
NO_RESULTS = "no results"
MACHINES_DIFFER = "machines differ"  # the two sides computed on different kinds of machine (report.machines)
NOT_ASKED = "no records asked for"  # no point logged per-example records: no comparison was asked for
REASONS = (PROMPTS_DIFFER, MACHINES_DIFFER, NO_BASELINE, NO_REFERENCE, NO_RECORDS, NO_SHARED, NO_RESULTS, NOT_ASKED)


class NotMade(str):
    """One comparison (or set of comparisons) not made: the line itself, with its :attr:`reason`."""

    reason: str

    def __new__(cls, reason: str, text: str) -> NotMade:
        note = super().__new__(cls, text)
        note.reason = reason
        return note


def reason_of(note: str) -> str:
    """The reason of a note (``other`` for a plain string)."""
    return getattr(note, "reason", "other")


def asked(notes: Iterable[str]) -> list[str]:
    """The notes of comparisons asked for: all but :data:`NOT_ASKED` (a sweep run without
    ``eval.log_samples`` asked for none, and its end line need not say so every time)."""
    return [n for n in notes if reason_of(n) != NOT_ASKED]


def count_text(notes: Iterable[str]) -> str:
    """``3 comparison(s) not made (prompts differ: 2, no baseline: 1)``; empty without notes (those of
    :data:`NOT_ASKED` are not counted)."""
    counts = Counter(reason_of(n) for n in asked(notes))
    total = sum(counts.values())
    if not total:
        return ""
    reasons = ", ".join(f"{reason}: {n}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{total} comparison(s) not made ({reasons})"


def listing(notes: Iterable[str]) -> str:
    """The console's list: a heading, then one indented line per note, its reason first."""
    notes = list(notes)
    if not notes:
        return ""
    return "Comparisons not made:\n" + "\n".join(f"  - [{reason_of(n)}] {n}" for n in notes)
