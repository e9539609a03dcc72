"""Tables of sweep points: tidy rows, their columns, CSV and markdown, aggregates over repeats."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mathneuro.methods.counts import sort_layer_keys
from mathneuro.report.identity import identity_fields
from mathneuro.report.overlap import mean_std
from mathneuro.results.schema import POINT_FIELDS, SELECTION_COLUMNS, is_number, tidy_row
from mathneuro.util.io import atomic_write

GROUP_FIELDS = ("model", "task", "filter", "method", "reference", "intervention", "intervention_args", "top_k",
                "scalar", "num_samples")
# (``reference``: set on ``random`` points sized by another method than MathNeuro only)


def tidy_rows(results: Iterable[Mapping]) -> list[dict]:
    """One row per sweep point (see :func:`tidy_row`)."""
    return [tidy_row(r) for r in results]


def metric_names(rows: Iterable[Mapping], *, include_stderr: bool = False) -> list[str]:
    """Metric columns (``math/...`` first, then ``nonmath/...``), stderr columns left out by default."""
    names: set[str] = set()
    for row in rows:
        for key in row:
            if key.startswith(("math/", "nonmath/")):
                if include_stderr or "_stderr" not in key.rsplit("/", 1)[-1]:
                    names.add(key)
    return sorted(names, key=lambda n: (not n.startswith("math/"), n))


def columns_of(rows: Sequence[Mapping]) -> list[str]:
    """Every column of ``rows`` in a stable, readable order: point, job, selection, metrics,
    baselines, absolute and relative changes, per-layer, per-module, then anything else."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    keys = list(seen)
    point_extra = [k for k in keys if "/" not in k and k not in POINT_FIELDS and k not in ("job", "objective")]
    ordered = [k for k in POINT_FIELDS if k in seen] + point_extra
    ordered += [k for k in ("job", "objective") if k in seen] + [k for k in SELECTION_COLUMNS if k in seen]
    ordered += metric_names(rows, include_stderr=True)
    for prefix in ("baseline/", "diff/", "rel_change/"):
        ordered += sorted((k for k in keys if k.startswith(prefix)),
                          key=lambda n: (not n[len(prefix):].startswith("math/"), n))
    layer_keys = [k for k in keys if k.startswith("per_layer/")]
    ordered += ["per_layer/" + k for k in sort_layer_keys(k[len("per_layer/") :] for k in layer_keys)]
    ordered += sorted(k for k in keys if k.startswith("per_module/"))
    ordered += [k for k in keys if k not in set(ordered)]
    return ordered


def write_csv(rows: Sequence[Mapping], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Write ``rows`` as CSV (one row each; absent or None values empty)."""
    path = Path(path)
    cols = list(columns) if columns is not None else columns_of(rows)

    def write(tmp: str) -> None:
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=cols, restval="", extrasaction="ignore")
            writer.writeheader()
            for row in rows:
                writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in cols})

    atomic_write(path, write)
    return path


def _fmt(value: Any, floatfmt: str) -> str:
    """A markdown cell: counts (a whole number of 1,000 or more) as integers with thousands separators,
    other floats in ``floatfmt``."""
    if value is None:
        return ""
    if is_number(value) and float(value).is_integer() and abs(value) >= 1000:
        return f"{int(value):,}"
    if isinstance(value, float):
        return format(value, floatfmt)
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[Mapping], columns: Sequence[str] | None = None, *, floatfmt: str = ".4g") -> str:
    """A GitHub markdown table of ``rows`` (default columns: point fields, selection size, metrics)."""
    if columns is None:
        all_cols = columns_of(rows)
        keep = set(POINT_FIELDS) | {"selection/num_selected", "selection/fraction_of_model"} | set(metric_names(rows))
        keep |= set(identity_fields(rows))  # the config keys that keep points apart
        columns = [c for c in all_cols if c in keep] or all_cols
    cols = list(columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c), floatfmt) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _sort_key(value: Any) -> tuple:
    if value is None:
        return (2, 0, "")
    if is_number(value):
        return (0, float(value), "")
    return (1, 0, str(value))


def aggregate(rows: Iterable[Mapping], by: Sequence[str], metric: str) -> list[dict]:
    """Mean, sample std (n-1; 0 for one value), min, max and n of ``metric`` per group of ``by``.

    Spread over repeats: leave ``seed`` out of ``by``. Rows without a finite number for ``metric``
    are skipped; groups are sorted by their ``by`` values."""
    groups: dict[tuple, list[float]] = {}
    for row in rows:
        value = row.get(metric)
        if not is_number(value):
            continue
        key = tuple(row.get(k) for k in by)
        groups.setdefault(key, []).append(float(value))
    out = []
    for key in sorted(groups, key=lambda k: tuple(_sort_key(v) for v in k)):
        values = groups[key]
        mean, std = mean_std(values)
        out.append({**dict(zip(by, key, strict=True)), "metric": metric, "mean": mean, "std": std,
                    "min": min(values), "max": max(values), "n": len(values)})
    return out


def group_fields(rows: Sequence[Mapping]) -> list[str]:
    """The fields that tell groups of seeds apart: those of :data:`GROUP_FIELDS` and the ``config.<key>``
    fields (:mod:`mathneuro.report.identity`) that vary among ``rows``; ``["method"]`` when none does."""
    fields = (*GROUP_FIELDS, *identity_fields(rows))
    return [f for f in fields if len({_hashable(r.get(f)) for r in rows}) > 1] or ["method"]


def comparison_rows(rows: Sequence[Mapping], metrics: Sequence[str], by: Sequence[str] | None = None) -> list[dict]:
    """One row per group of ``by`` (default: the point fields that vary, except seed) with
    ``<metric>/mean``, ``<metric>/std`` and ``n`` per metric: the sweep's comparison table."""
    if by is None:
        by = group_fields(rows)
    table: dict[tuple, dict] = {}
    for metric in metrics:
        for agg in aggregate(rows, by, metric):
            key = tuple(agg[k] for k in by)
            entry = table.setdefault(key, dict(zip(by, key, strict=True)))
            entry[f"{metric}/mean"] = agg["mean"]
            entry[f"{metric}/std"] = agg["std"]
            entry["n"] = max(entry.get("n", 0), agg["n"])
    return [table[k] for k in sorted(table, key=lambda k: tuple(_sort_key(v) for v in k))]


def _hashable(value: Any) -> Any:
    return json.dumps(value, sort_keys=True, default=str) if isinstance(value, (dict, list)) else value
