"""A sweep report as plain text for a terminal: every point beside the unedited model, then the paired
differences with their intervals.

:func:`console_report` reads what :func:`mathneuro.report.write_report` returns. The multirun callback
prints it when ``hydra.callbacks.sweep_report.echo`` is true (``experiment=demo``, what ``make run``
runs), so a newcomer sees whether an edit's effect is specific to math or merely its size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from mathneuro.report.inference import NO_DIFFERENCE, VERDICT_INTERVAL, row_verdict
from mathneuro.report.not_made import listing
from mathneuro.report.tables import comparison_rows

BASELINE_COLUMN = "unedited"


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    return f"{value:.4g}" if abs(value) >= 1000 else f"{value:.3f}"


def _plain_table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    """Left-aligned first column, right-aligned others, two spaces apart."""
    widths = [max(len(str(row[i])) for row in [header, *body]) for i in range(len(header))]
    lines = []
    for row in [header, *body]:
        cells = [str(row[0]).ljust(widths[0])] + [str(c).rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        lines.append("  ".join(cells).rstrip())
    return lines


def points_text(rows: Sequence[Mapping], metrics: Sequence[str]) -> str:
    """One column per group of points (mean over seeds) beside the unedited model, one line per metric."""
    metrics = [m for m in metrics if not m.endswith("_stderr")]
    groups = comparison_rows(rows, metrics)
    if not groups or not metrics:
        return ""
    by = [k for k in groups[0] if not k.endswith(("/mean", "/std")) and k != "n"]
    labels = [" ".join(str(g[k]) for k in by) for g in groups]
    baseline = {m: next((r[f"baseline/{m}"] for r in rows if f"baseline/{m}" in r), None) for m in metrics}
    header = ["metric", BASELINE_COLUMN, *labels]
    body = [[m, _number(baseline[m]), *(_number(g.get(f"{m}/mean")) for g in groups)] for m in metrics]
    return "\n".join(_plain_table(header, body))


def paired_text(paired: Sequence[Mapping], *, confidence: float = 0.95) -> str:
    """One line per paired comparison: ``edited - reference``, the mean difference, its draws + examples
    interval and the verdict that interval gives (:func:`~mathneuro.report.inference.row_verdict`, the rule
    summary.md, paired.csv and the W&B report run use); ``*`` marks a difference shown."""
    if not paired:
        return ""
    body = []
    for row in paired:
        reference = BASELINE_COLUMN if row["reference"] == "baseline" else row["reference"]
        verdict = row_verdict(row)
        mark = " *" if verdict != NO_DIFFERENCE else ""
        body.append([f"{row['method']} - {reference}", f"{row['task']}/{row['metric']}", str(row["n_examples"]),
                     f"{row['diff']:+.3f} [{row['ci95_low']:+.3f}, {row['ci95_high']:+.3f}]{mark}", verdict])
    header = ["comparison", "metric", "examples", f"difference [{confidence:.0%} interval]", "verdict"]
    return "\n".join(_plain_table(header, body))


def console_report(report: Mapping) -> str:
    """The text ``make run`` ends with, from :func:`mathneuro.report.write_report`'s return value."""
    parts = []
    table = points_text(report.get("rows") or [], report.get("headline_metrics") or report.get("metrics") or [])
    if table:
        parts.append("Scores (mean over seeds):\n" + table)
    paired = paired_text(report.get("paired") or [])
    if paired:
        parts.append(f"Paired differences on the same examples, with their {VERDICT_INTERVAL} intervals, which "
                     "decide the verdict here, in summary.md and in paired.csv (* : a difference shown):\n" + paired)
    elif report.get("paired_notes"):
        parts.append("No paired differences.")
    parts.append(f"Report: {report.get('markdown')}")
    if report.get("paired_notes"):  # last, where a reader looks for what is missing
        parts.append(listing(report["paired_notes"]))
    return "\n\n".join(parts)
