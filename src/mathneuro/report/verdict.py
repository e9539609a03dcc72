"""The one verdict rule of a paired comparison, and the cells every output shows it in.

The console's mark, ``summary.md``, ``paired.csv``'s ``difference``, the W&B report run and the docs all
call :func:`row_verdict`: the draws + examples interval decides (:data:`VERDICT_RULE` says why); the
examples-only interval is shown, labelled, and decides nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HIGHER, LOWER, NO_DIFFERENCE = "higher", "lower", "no difference shown"

#: The interval that decides every paired verdict, as outputs label it.
VERDICT_INTERVAL = "draws + examples"
#: Why that one, in a sentence the report's footnotes and docs share.
VERDICT_RULE = ("the verdict is decided by the draws + examples interval alone (excludes 0: higher or lower; "
                "else no difference shown): it resamples the identification draws as well as the examples and, "
                "for 0/1 metrics, is never narrower than Newcombe's interval (rule of three when nothing "
                "changed), so a difference that another draw of weights or a ceiling could explain is not "
                "called one; the examples-only interval is narrower, is shown for reference and decides nothing")


def interval_verdict(low: float, high: float) -> str:
    """THE verdict rule of a paired comparison: ``higher`` when the interval lies above 0, ``lower`` when
    below, else ``no difference shown``. Give it the :data:`VERDICT_INTERVAL` (``ci95_low``, ``ci95_high``)."""
    if low > 0:
        return HIGHER
    if high < 0:
        return LOWER
    return NO_DIFFERENCE


def row_verdict(row: Mapping[str, Any]) -> str:
    """The verdict of one ``paired.csv`` row: :func:`interval_verdict` of its draws + examples interval.
    Every output (console, summary.md, paired.csv, the W&B report run) calls this, so they never disagree."""
    return interval_verdict(float(row["ci95_low"]), float(row["ci95_high"]))


def markdown_cells(row: Mapping[str, Any]) -> dict[str, str]:
    """``{header: cell}`` of one paired row for a markdown table: the difference, the draws + examples
    interval (which decides, :func:`row_verdict`), the examples-only interval (labelled, for reference),
    the examples changed each way, the verdict and, where a margin or a family was set, the equivalence
    verdicts and Holm's (in brackets)."""
    cells = {
        "difference": f"{row['diff']:+.3f}",
        f"interval, {VERDICT_INTERVAL} (decides)": f"[{row['ci95_low']:+.3f}, {row['ci95_high']:+.3f}]",
        "interval, examples only": f"[{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]",
        "changed +/-": f"{row['changed_up']}/{row['changed_down']}",
    }
    holm_diff = f" (Holm: {row['holm_difference']})" if row.get("holm_difference") else ""
    cells["verdict"] = f"{row_verdict(row)}{holm_diff}"
    if row.get("margin") is not None:
        holm_eq = f" (Holm: {row['holm_equivalence']})" if row.get("holm_equivalence") else ""
        cells[f"within +-{row['margin']:g}"] = f"{row['equivalence']}{holm_eq}"
    return cells
