"""Data efficiency of the identification, on both sets it produces: M and the math top-K set.

How many samples does an identification need? Two independent draws of N samples each give two
selections; their overlap, as N grows, answers it. MathNeuro makes two sets per draw: the math
top-K set (top-K of the math score per matrix) and M = that set minus the filter's top-K. Their
overlaps differ a lot (on SmolLM2-135M at K = 15 %, N = 1: 0.83 for the top-K sets against 0.38
for M), so both are reported.

Where the sets come from: a sweep run with ``save_selection=true`` writes every point's selection as
``selection.safetensors`` and the extra sets its method declares (MathNeuro: the math top-K set,
``selection_topk.safetensors``, :data:`MATH_TOPK_FILE`). Older sweeps lack the second file; the math
top-K set is exactly what ``method=wanda`` selects (per-matrix top-K of the same math score), which
MathNeuro's spec says, so a ``wanda`` point of the same model, task, top-K, N and seed serves too.
Every method with saved selections is a study of its own.
The figure is :func:`mathneuro.report.figures.plot_data_efficiency`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mathneuro.report.figures import plot_data_efficiency
from mathneuro.report.identity import PREFIX, identity_fields
from mathneuro.report.overlap import data_efficiency, load_selection_file
from mathneuro.report.references import facts_of
from mathneuro.report.tables import write_csv

SELECTION_FILE = "selection.safetensors"
MATH_TOPK_FILE = "selection_topk.safetensors"
GROUP_FIELDS = ("model", "task", "filter", "top_k", "method")  # one data-efficiency study per combination
_ROW_KEYS = ("num_samples", "seeds", "pairs", "jaccard_mean", "jaccard_std", "a_in_b_mean", "ref_num_samples",
             "ref_in_n_mean", "n_in_ref_mean", "ref_jaccard_mean")
COLUMNS = (*GROUP_FIELDS, *_ROW_KEYS, *(f"topk_{k}" for k in _ROW_KEYS if k != "num_samples"))


def _int_or(value: Any) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def efficiency_selections(results: Iterable[Mapping]) -> dict[tuple, tuple[dict, dict]]:
    """Saved selections of a sweep's results, per study: ``{(model, task, filter, top_k, method): (sets,
    second sets)}``, each keyed ``(num_samples, seed)`` and opened lazily.

    The sets are the points' ``selection.safetensors``. The second sets are the first extra selection the
    method saves (its facts' ``extra_selections``: MathNeuro's math top-K set, ``selection_topk.safetensors``)
    or else the selection of the point of the method that extra set is (Wanda for MathNeuro's top-K set)
    with the same model, task, top-K, N and seed."""
    results = list(results)
    saved: dict[tuple, Path] = {}
    for r in results:
        p = r.get("point") or {}
        path = Path(str(r.get("_dir", "."))) / SELECTION_FILE
        if path.is_file():
            saved[(p.get("method"), p.get("model"), p.get("task"), p.get("top_k"), _int_or(p.get("num_samples")),
                   _int_or(p.get("seed")))] = path
    studies: dict[tuple, tuple[dict, dict]] = {}
    for r in results:
        p = r.get("point") or {}
        folder = Path(str(r.get("_dir", ".")))
        if not (folder / SELECTION_FILE).is_file():
            continue
        n, seed = _int_or(p.get("num_samples")), _int_or(p.get("seed"))
        split = tuple((k, v) for k, v in sorted(p.items()) if k.startswith(PREFIX))  # config keys keeping points apart
        m_sets, second_sets = studies.setdefault((*(p.get(f) for f in GROUP_FIELDS), *split), ({}, {}))
        m_sets[(n, seed)] = load_selection_file(folder / SELECTION_FILE)
        extras = facts_of(r).get("extra_selections") or {}
        if not extras:
            continue
        suffix, source = next(iter(extras.items()))
        second = folder / f"selection_{suffix}.safetensors"
        if not second.is_file():
            second = saved.get((source, p.get("model"), p.get("task"), p.get("top_k"), n, seed))
        if second is not None:
            second_sets[(n, seed)] = load_selection_file(second)
    return studies


def efficiency_table(results: Iterable[Mapping], *, reference_samples: int | None = None) -> list[dict]:
    """One row per study and N: overlaps of M (``jaccard_mean``, ``a_in_b_mean``, ``ref_in_n_mean``,
    ...) and of the math top-K sets (the same with ``topk_``), see
    :func:`mathneuro.report.overlap.data_efficiency`. Top-K columns are left out (None) where a draw has
    no saved top-K set. Studies without two draws at any N are skipped."""
    rows = []
    for key, (m_sets, top_sets) in sorted(efficiency_selections(results).items(), key=lambda kv: str(kv[0])):
        ns = [n for n, _ in m_sets]
        if not any(ns.count(n) > 1 for n in set(ns)) and len(set(ns)) < 2:
            continue
        complete_top = top_sets if set(top_sets) == set(m_sets) else None
        for row in data_efficiency(m_sets, reference_samples=reference_samples, topk_selections=complete_top):
            rows.append({**dict(zip(GROUP_FIELDS, key, strict=False)), **dict(key[len(GROUP_FIELDS):]), **row})
    return rows


def write_efficiency_csv(rows: Sequence[Mapping], path: str | Path) -> Path:
    """``data_efficiency.csv`` with :data:`COLUMNS` (empty cells where a number is unknown)."""
    return write_csv(rows, path, [*COLUMNS, *identity_fields(rows)])  # and any config.<key> that keeps points apart


def _f(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


def efficiency_markdown(rows: Sequence[Mapping]) -> str:
    """A markdown table: per study and N, the overlap of two draws for M and for the math top-K sets."""
    lines = ["| model | method | filter | top_k | N | draws | Jaccard M | M: one in other | Jaccard top-K "
             "| top-K: one in other | share of M(ref) found | share of top-K(ref) found |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.get('model')} | {r.get('method')} | {r.get('filter')} | {r.get('top_k')} "
                     f"| {r['num_samples']} | {r['seeds']} "
                     f"| {_f(r.get('jaccard_mean'))} | {_f(r.get('a_in_b_mean'))} | {_f(r.get('topk_jaccard_mean'))} "
                     f"| {_f(r.get('topk_a_in_b_mean'))} | {_f(r.get('ref_in_n_mean'))} "
                     f"| {_f(r.get('topk_ref_in_n_mean'))} |")
    return "\n".join(lines) + "\n"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def write_data_efficiency(results: Iterable[Mapping], out_dir: str | Path) -> dict | None:
    """``data_efficiency.csv``, one figure per study and a markdown section, for a sweep whose
    points saved selections at several N or seeds; None (nothing written) otherwise."""
    rows = efficiency_table(results)
    if not rows:
        return None
    out = Path(out_dir)
    csv_path = write_efficiency_csv(rows, out / "data_efficiency.csv")
    studies: dict[tuple, list[dict]] = {}
    split = identity_fields(rows)
    for r in rows:
        studies.setdefault(tuple(r.get(f) for f in (*GROUP_FIELDS, *split)), []).append(r)
    figures = {}
    for key, group in studies.items():
        name = "data_efficiency" if len(studies) == 1 else "data_efficiency_" + _safe("_".join(map(str, key)))
        model, _task, filt, top_k, method = key[:len(GROUP_FIELDS)]
        figures[name] = str(plot_data_efficiency(
            group, out / f"{name}.png", title=f"{model}, {method}, {filt} filter, K={top_k}: two independent draws"))
    missing_top = any(r.get("topk_jaccard_mean") is None and r.get("jaccard_mean") is not None for r in rows)
    md = ["## Data efficiency: overlap of two independent identifications\n", efficiency_markdown(rows),
          "\n".join(f"![{name}]({Path(path).name})\n" for name, path in figures.items())]
    if missing_top:
        md.append(f"- some draws have no saved second set (e.g. MathNeuro's math top-K set, {MATH_TOPK_FILE}, written "
                  "by save_selection=true, or a wanda point of the same N and seed): their top-K columns are empty\n")
    return {"rows": rows, "csv": str(csv_path), "figures": figures, "markdown": "\n".join(md)}
