"""``write_report``: a sweep directory -> points.csv, summary.md and the figures."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from mathneuro.report.efficiency import write_data_efficiency
from mathneuro.report.figures import plot_metric_vs_scalar, plot_metric_vs_topk, plot_per_layer
from mathneuro.report.identity import mark_identities
from mathneuro.report.not_made import reason_of
from mathneuro.report.paired import write_paired
from mathneuro.report.sweep import load_results
from mathneuro.report.tables import (
    GROUP_FIELDS,
    _hashable,
    _sort_key,
    aggregate,
    comparison_rows,
    group_fields,
    markdown_table,
    metric_names,
    tidy_rows,
    write_csv,
)
from mathneuro.results.schema import is_number
from mathneuro.util.io import write_text_atomic


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def _distinct(rows: Sequence[Mapping], field: str) -> list:
    values = {_hashable(r.get(field)) for r in rows}
    return sorted(values, key=_sort_key)


def configured_tasks(results: Sequence[Mapping]) -> set[str]:
    """The task names the points were asked to evaluate (``config.eval.tasks``, over all points)."""
    tasks: set[str] = set()
    for result in results:
        named = ((result.get("config") or {}).get("eval") or {}).get("tasks")
        if isinstance(named, str):
            tasks.add(named)
        elif isinstance(named, (list, tuple)):
            tasks.update(str(t) for t in named)
    return tasks


def headline_metrics(metrics: Sequence[str], tasks: set[str]) -> list[str]:
    """The metrics of the configured tasks themselves: a group's subtasks (MMLU's 57 subjects) would
    make a figure of 59 panels; they stay in points.csv, the full table and paired.csv. All of
    ``metrics`` where no task is known or none matches."""
    kept = [m for m in metrics if m.count("/") >= 2 and m.split("/", 2)[1] in tasks]
    return kept or list(metrics)


def _make_figures(rows: list[dict], metrics: list[str], out: Path) -> tuple[dict[str, str], list[str]]:
    figures: dict[str, str] = {}
    notes: list[str] = []
    for intervention in _distinct(rows, "intervention"):
        sub = [r for r in rows if _hashable(r.get("intervention")) == intervention]
        tag = _safe_name(str(intervention)) if intervention is not None else "all"
        plotted = [m for m in metrics if any(is_number(r.get(m)) for r in sub)]
        if not plotted:
            continue
        topks = [v for v in _distinct(sub, "top_k") if is_number(v) and v > 0]
        scalars = [v for v in _distinct(sub, "scalar") if is_number(v)]
        if len(topks) > 1 or (topks and len(scalars) <= 1):
            name = f"{tag}_vs_topk"
            figures[name] = str(plot_metric_vs_topk(sub, plotted, out / f"{name}.png",
                                                    title=f"{intervention}: metric vs top-K (mean ± std over seeds)"))
        skipped = sum(1 for r in sub if not (is_number(r.get("top_k")) and r["top_k"] > 0))
        if skipped:
            notes.append(f"{skipped} {intervention} point(s) without a positive top_k are not in {tag}_vs_topk.png")
        if len(scalars) > 1:
            name = f"{tag}_vs_scalar"
            figures[name] = str(plot_metric_vs_scalar(sub, plotted, out / f"{name}.png",
                                                      title=f"{intervention}: metric vs scale factor "
                                                            "(mean ± std over seeds)"))
    if any(k.startswith("per_layer/") for r in rows for k in r):
        figures["per_layer"] = str(plot_per_layer(rows, out / "per_layer.png"))
    return figures, notes


def is_neuron_selection(row: Mapping) -> bool:
    """A point that selected neurons (LAPE, random_neurons): it edits more weights than it selected."""
    edited = row.get("selection/num_weights_edited")
    return is_number(edited) and edited != row.get("selection/num_selected")


def _selection_markdown(rows: list[dict]) -> str:
    """Selection sizes, mean over seeds: counts in their unit (weights or neurons), the share of the scored
    weights or neurons, and a share of the model's parameters only for weights (a neuron is no parameter:
    neurons show the weights they feed, ``fraction_of_model_edited``)."""
    shown = [{**r, "unit": "neurons" if is_neuron_selection(r) else "weights"} for r in rows]
    for r in shown:
        if r["unit"] == "neurons":
            r.pop("selection/fraction_of_model", None)
    by = group_fields(rows) + (["unit"] if any(r["unit"] == "neurons" for r in shown) else [])
    sel_rows: dict[tuple, dict] = {}
    sel_cols = ["selection/num_selected", "selection/fraction_of_model", "selection/fraction_of_scored"]
    if any("selection/fraction_of_model_edited" in r for r in rows):  # neurons counted as the weights they feed
        sel_cols.append("selection/fraction_of_model_edited")
    for field in sel_cols:
        for agg in aggregate(shown, by, field):
            key = tuple(agg[k] for k in by)
            sel_rows.setdefault(key, dict(zip(by, key, strict=True)))[field] = agg["mean"]
    table = [sel_rows[k] for k in sorted(sel_rows, key=lambda k: tuple(_sort_key(v) for v in k))]
    return "\n## Selection size (mean over seeds)\n\n" + markdown_table(table, by + sel_cols)


def _summary_markdown(sweep: Path, rows: list[dict], missing: list[dict], metrics: list[str],
                      figures: Mapping[str, str], notes: list[str], out: Path) -> str:
    parts = [f"# Sweep report: `{sweep}`\n",
             f"{len(rows)} complete point(s), {len(missing)} missing or incomplete.\n"]
    if rows and metrics:
        parts.append("## Comparison (mean ± std over seeds)\n")
        comp = comparison_rows(rows, metrics)
        by = [c for c in comp[0] if not c.endswith(("/mean", "/std")) and c != "n"] if comp else []
        display = []
        for entry in comp:
            item = {k: entry.get(k) for k in by}
            for m in metrics:
                if f"{m}/mean" in entry:  # one seed has no spread to show
                    spread = f" ± {entry[f'{m}/std']:.2g}" if entry.get("n", 1) > 1 else ""
                    item[m] = f"{entry[f'{m}/mean']:.4g}{spread}"
            item["n"] = entry.get("n")
            display.append(item)
        parts.append(markdown_table(display, by + [m for m in metrics] + ["n"]))
    if rows and any("selection/num_selected" in r for r in rows):
        parts.append(_selection_markdown(rows))
    parts.append("\n## Missing or incomplete points\n")
    if missing:
        items = []
        for m in missing:
            hint = f" — overrides: `{' '.join(m['overrides'])}`" if m.get("overrides") else ""
            items.append(f"- `{m['job']}`: {m['reason']}{hint}\n")
        parts.append("".join(items))
    else:
        parts.append("None.\n")
    if notes:
        parts.append("\n## Notes\n")
        parts.append("".join(f"- {n}\n" for n in notes))
    if figures:
        parts.append("\n## Figures\n")
        parts.append("\n".join(f"![{name}]({os.path.relpath(fpath, out)})\n" for name, fpath in figures.items()))
    if rows:
        parts.append("\n## All points\n")  # a neuron is no parameter: no share of the model's for neurons
        parts.append(markdown_table([{k: v for k, v in r.items()
                                      if not (k == "selection/fraction_of_model" and is_neuron_selection(r))}
                                     for r in rows]))
    return "\n".join(parts)


def not_made_markdown(notes: Sequence[str]) -> str:
    """The last section of ``summary.md``: every comparison that could not be made, with its reason."""
    if not notes:
        return ""
    return "\n## Comparisons not made\n\n" + "".join(f"- [{reason_of(n)}] {n}\n" for n in notes)


def write_report(sweep_dir: str | Path, out_dir: str | Path | None = None, *,
                 metrics: Sequence[str] | None = None, margin: float | None = None,
                 families: Sequence[str] = ()) -> dict:
    """Write ``points.csv``, ``summary.md`` and PNG figures for a sweep (default ``<sweep>/report``).

    Figures: ``<intervention>_vs_topk.png`` (every metric of the evaluated tasks, math and non-math
    side by side; a group's subtasks only when ``metrics`` names them),
    ``<intervention>_vs_scalar.png`` when several scale factors were run, ``per_layer.png``.
    With per-example records also ``paired.csv`` (:mod:`mathneuro.report.paired`); with selections saved
    for several draws ``data_efficiency.csv`` and its figure (:mod:`mathneuro.report.efficiency`). ``margin`` and
    ``families``: equivalence verdicts and Holm-adjusted decisions in ``paired.csv``
    (:mod:`mathneuro.report.inference`). Returns ``{"csv", "markdown", "figures": {name: path}, "rows", "missing",
    "metrics", "headline_metrics", "comparison", "paired", "paired_csv", "paired_notes", "data_efficiency",
    "data_efficiency_csv"}``.
    Raises FileNotFoundError for a missing dir and ValueError when no complete point exists."""
    sweep = Path(sweep_dir)
    complete, missing = load_results(sweep)
    if not complete:
        where = f" ({len(missing)} missing or incomplete)" if missing else ""
        raise ValueError(f"no complete results.json under {sweep}{where}")
    out = Path(out_dir) if out_dir is not None else sweep / "report"
    out.mkdir(parents=True, exist_ok=True)
    mark_identities(complete, GROUP_FIELDS)  # points that differ in a config key are no seeds of one point
    rows = tidy_rows(complete)
    chosen = list(metrics) if metrics else metric_names(rows)
    unknown = [m for m in chosen if not any(m in r for r in rows)]
    if unknown:
        raise ValueError(f"metrics not found in any result: {', '.join(unknown)}; "
                         f"have: {', '.join(metric_names(rows))}")
    csv_path = write_csv(rows, out / "points.csv")
    headline = chosen if metrics else headline_metrics(chosen, configured_tasks(complete))
    figures, notes = _make_figures(rows, headline, out)
    if len(headline) < len(chosen):
        left = [m for m in chosen if m not in headline]
        notes.append(f"{len(left)} subtask metric(s) of evaluated groups (e.g. `{left[0]}`) are left out of the "
                     "figures and the comparison table; points.csv, the table of all points and paired.csv have them")
    md = _summary_markdown(sweep, rows, missing, headline, figures, notes, out)

    paired = write_paired(complete, out, margin=margin, families=families)
    efficiency = write_data_efficiency(complete, out)
    figures.update(efficiency["figures"] if efficiency else {})
    md_path = out / "summary.md"
    write_text_atomic(md_path, md + "\n" + paired["markdown"] + ("\n" + efficiency["markdown"] if efficiency else "")
                      + not_made_markdown(paired["notes"]))
    return {"csv": str(csv_path), "markdown": str(md_path), "figures": figures, "rows": rows,
            "missing": missing, "metrics": chosen, "headline_metrics": headline,
            "comparison": comparison_rows(rows, chosen),
            "paired": paired["rows"], "paired_csv": paired["csv"], "paired_notes": paired["notes"],
            "data_efficiency": efficiency["rows"] if efficiency else [],
            "data_efficiency_csv": efficiency["csv"] if efficiency else None}
