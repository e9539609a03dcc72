"""Reports of sweeps: read every ``results.json`` of a Hydra multirun, tabulate, aggregate, plot.

Researchers look before they read: :func:`write_report` turns a sweep directory into a tidy CSV
(one row per point), a markdown summary (comparison tables over repeats and a list of every missing
or incomplete point) and the paper's figures as PNGs; :func:`log_report_to_wandb` sends the same to
W&B with columns that a dashboard can group by (method, filter, top_k, scalar, seed).
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from mathneuro.analysis import sort_layer_keys

POINT_FIELDS = ("model", "task", "filter", "method", "top_k", "intervention", "scalar", "seed", "num_samples")
SELECTION_FIELDS = ("num_selected", "num_scored", "num_parameters", "fraction_of_model", "fraction_of_scored")
SELECTION_COLUMNS = tuple(f"selection/{f}" for f in SELECTION_FIELDS)  # the runner's W&B summary names
GROUP_FIELDS = ("model", "task", "filter", "method", "intervention", "top_k", "scalar", "num_samples")
WANDB_KEY_COLUMNS = ("method", "filter", "top_k", "scalar", "seed", "intervention", "model", "task", "num_samples")
_SKIP_DIRS = {".hydra", "wandb", "report", "__pycache__"}


# ------------------------------------------------------------------------------------------- loading
def _natural_key(path: Path) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(path))]


def _is_job_dir(path: Path) -> bool:
    return (path / ".hydra").is_dir() or (path / "results.json").is_file()


def _job_dirs(sweep_dir: Path) -> list[Path]:
    found = []
    for root, dirs, _files in os.walk(sweep_dir):
        dirs[:] = [d for d in dirs if d not in _SKIP_DIRS and not d.startswith(".")]
        here = Path(root)
        if _is_job_dir(here):
            found.append(here)
    return sorted(found, key=_natural_key)


def _overrides(job_dir: Path) -> list[str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    try:
        import yaml

        data = yaml.safe_load(path.read_text())
    except Exception:  # noqa: BLE001 - a broken overrides file only loses the hint
        return []
    return [str(x) for x in data] if isinstance(data, list) else []


def load_results(sweep_dir: str | Path) -> tuple[list[dict], list[dict]]:
    """Read every job dir of a sweep: ``(complete, missing)``.

    A job dir is any directory (the sweep dir itself included) holding ``.hydra/`` or
    ``results.json``. Complete results get ``_dir`` (absolute path) and ``_job`` (path relative to
    the sweep dir). Each missing/incomplete entry has ``path``, ``job``, ``reason`` (no results.json,
    unreadable JSON, status != complete, missing fields) and ``overrides`` (from
    ``.hydra/overrides.yaml``) plus ``point`` when the file gives one."""
    sweep = Path(sweep_dir)
    if not sweep.is_dir():
        raise FileNotFoundError(f"sweep directory not found: {sweep}")
    complete: list[dict] = []
    missing: list[dict] = []
    for job in _job_dirs(sweep):
        rel = "." if job == sweep else job.relative_to(sweep).as_posix()
        entry = {"path": str(job), "job": rel, "overrides": _overrides(job)}
        path = job / "results.json"
        if not path.is_file():
            missing.append({**entry, "reason": "no results.json"})
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            missing.append({**entry, "reason": f"unreadable JSON: {err}"})
            continue
        if not isinstance(data, dict):
            missing.append({**entry, "reason": "unreadable JSON: top level is not an object"})
            continue
        if isinstance(data.get("point"), dict):
            entry["point"] = data["point"]
        status = data.get("status")
        if status != "complete":
            missing.append({**entry, "reason": f"status={status!r}, not 'complete'"})
            continue
        absent = [k for k in ("point", "metrics") if not isinstance(data.get(k), dict)]
        if absent:
            missing.append({**entry, "reason": f"missing fields: {', '.join(absent)}"})
            continue
        complete.append({**data, "_dir": str(job), "_job": rel})
    return complete, missing


# -------------------------------------------------------------------------------------------- rows
def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def tidy_row(result: Mapping) -> dict:
    """One flat row of a result: point fields, ``job``, ``objective``, ``selection/<number>``, every metric, the
    baseline metrics as ``baseline/<m>``, relative changes ``delta/<m>`` = (after - before) / before
    (only where before is a non-zero number), and ``per_layer/<block>`` / ``per_module/<type>``."""
    row: dict[str, Any] = dict(result.get("point") or {})
    if "_job" in result:
        row["job"] = result["_job"]
    selection = result.get("selection") or {}
    for key in SELECTION_FIELDS:
        if key in selection:
            row[f"selection/{key}"] = selection[key]
    if _is_number(result.get("objective")):
        row["objective"] = result["objective"]
    metrics = result.get("metrics") or {}
    baseline = result.get("baseline_metrics") or {}
    for name, value in metrics.items():
        row[name] = value
    for name, value in baseline.items():
        row[f"baseline/{name}"] = value
    for name, after in metrics.items():
        before = baseline.get(name)
        if "_stderr" in name.rsplit("/", 1)[-1]:
            continue  # a relative change of a standard error means nothing
        if _is_number(after) and _is_number(before) and before != 0:
            row[f"delta/{name}"] = (after - before) / before
    for key, count in (selection.get("per_layer") or {}).items():
        row[f"per_layer/{key}"] = count
    for key, count in (selection.get("per_module") or {}).items():
        row[f"per_module/{key}"] = count
    return row


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
    baselines, deltas, per-layer, per-module, then anything else."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in row:
            seen.setdefault(key, None)
    keys = list(seen)
    point_extra = [k for k in keys if "/" not in k and k not in POINT_FIELDS and k not in ("job", "objective")]
    ordered = [k for k in POINT_FIELDS if k in seen] + point_extra
    ordered += [k for k in ("job", "objective") if k in seen] + [k for k in SELECTION_COLUMNS if k in seen]
    ordered += metric_names(rows, include_stderr=True)
    for prefix in ("baseline/", "delta/"):
        ordered += sorted((k for k in keys if k.startswith(prefix)), key=lambda n: (not n[len(prefix):].startswith("math/"), n))
    layer_keys = [k for k in keys if k.startswith("per_layer/")]
    ordered += ["per_layer/" + k for k in sort_layer_keys(k[len("per_layer/") :] for k in layer_keys)]
    ordered += sorted(k for k in keys if k.startswith("per_module/"))
    ordered += [k for k in keys if k not in set(ordered)]
    return ordered


def write_csv(rows: Sequence[Mapping], path: str | Path, columns: Sequence[str] | None = None) -> Path:
    """Write ``rows`` as CSV (one row each; absent or None values empty)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = list(columns) if columns is not None else columns_of(rows)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=cols, restval="", extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in cols})
    return path


def _fmt(value: Any, floatfmt: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return format(value, floatfmt)
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[Mapping], columns: Sequence[str] | None = None, *, floatfmt: str = ".4g") -> str:
    """A GitHub markdown table of ``rows`` (default columns: point fields, selection size, metrics)."""
    if columns is None:
        all_cols = columns_of(rows)
        keep = set(POINT_FIELDS) | {"selection/num_selected", "selection/fraction_of_model"} | set(metric_names(rows))
        columns = [c for c in all_cols if c in keep] or all_cols
    cols = list(columns)
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_fmt(row.get(c), floatfmt) for c in cols) + " |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------- aggregation
def _sort_key(value: Any) -> tuple:
    if value is None:
        return (2, 0, "")
    if _is_number(value):
        return (0, float(value), "")
    return (1, 0, str(value))


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def aggregate(rows: Iterable[Mapping], by: Sequence[str], metric: str) -> list[dict]:
    """Mean, sample std (n-1; 0 for one value), min, max and n of ``metric`` per group of ``by``.

    Spread over repeats: leave ``seed`` out of ``by``. Rows without a finite number for ``metric``
    are skipped; groups are sorted by their ``by`` values."""
    groups: dict[tuple, list[float]] = {}
    for row in rows:
        value = row.get(metric)
        if not _is_number(value):
            continue
        key = tuple(row.get(k) for k in by)
        groups.setdefault(key, []).append(float(value))
    out = []
    for key in sorted(groups, key=lambda k: tuple(_sort_key(v) for v in k)):
        values = groups[key]
        mean, std = _mean_std(values)
        out.append({**dict(zip(by, key, strict=True)), "metric": metric, "mean": mean, "std": std,
                    "min": min(values), "max": max(values), "n": len(values)})
    return out


def comparison_rows(rows: Sequence[Mapping], metrics: Sequence[str], by: Sequence[str] | None = None) -> list[dict]:
    """One row per group of ``by`` (default: the point fields that vary, except seed) with
    ``<metric>/mean``, ``<metric>/std`` and ``n`` per metric: the sweep's comparison table."""
    if by is None:
        by = [f for f in GROUP_FIELDS if len({_hashable(r.get(f)) for r in rows}) > 1] or ["method"]
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


# ----------------------------------------------------------------------------------------- figures
def _save(fig, path: str | Path) -> Path:
    """Lay out, write (creating folders) and close one figure; return its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _label_fields(rows: Sequence[Mapping], exclude: Sequence[str]) -> list[str]:
    """method, plus every other point field that varies among ``rows`` (seed and x excluded)."""
    fields = ["method"]
    candidates = [f for f in POINT_FIELDS if f not in ("method", "seed")]
    for row in rows:
        for key in row:
            if "/" not in key and key not in candidates and key not in POINT_FIELDS and key not in ("job", "objective"):
                candidates.append(key)
    for field in candidates:
        if field in exclude:
            continue
        if len({_hashable(r.get(field)) for r in rows}) > 1:
            fields.append(field)
    return fields


def _label(row: Mapping, fields: Sequence[str]) -> str:
    head = str(row.get("method", "?"))
    extras = []
    for field in fields[1:]:
        value = row.get(field)
        extras.append(str(value) if field == "filter" else f"{field}={value}")
    return f"{head} ({', '.join(extras)})" if extras else head


def _panel_title(metric: str) -> str:
    return metric.replace("/", " / ")


def _series(rows: Sequence[Mapping], x: str, metric: str, fields: Sequence[str]) -> dict[str, list[tuple]]:
    """label -> sorted [(x, mean, std, n)] over seeds."""
    out: dict[str, list[tuple]] = {}
    labelled: dict[str, list[Mapping]] = {}
    for row in rows:
        labelled.setdefault(_label(row, fields), []).append(row)
    for label in sorted(labelled):
        points = [(a[x], a["mean"], a["std"], a["n"]) for a in aggregate(labelled[label], [x], metric)
                  if _is_number(a[x])]
        if points:
            out[label] = sorted(points)
    return out


def _plot_vs(rows: Sequence[Mapping], x: str, metrics: Sequence[str], path: str | Path, *, log_x: bool,
             title: str | None, xlabel: str) -> Path:
    plt = _pyplot()
    rows = [r for r in rows if _is_number(r.get(x)) and (not log_x or r[x] > 0)]
    metrics = [m for m in metrics if any(_is_number(r.get(m)) for r in rows)]
    if not metrics:
        raise ValueError(f"no rows with a numeric {x!r} and any of the metrics to plot")
    fields = _label_fields(rows, exclude=[x])
    labels = sorted({_label(r, fields) for r in rows})
    colors = {label: f"C{i % 10}" for i, label in enumerate(labels)}  # same colour in every panel
    markers = {label: "os^DvP*X"[i % 8] for i, label in enumerate(labels)}  # tells apart coinciding lines
    xs_all = sorted({float(r[x]) for r in rows})
    ncols = min(len(metrics), 3)
    nrows = math.ceil(len(metrics) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.9 * nrows), squeeze=False)
    for index, metric in enumerate(metrics):
        ax = axes[index // ncols][index % ncols]
        for label, points in _series(rows, x, metric, fields).items():
            xs = [p[0] for p in points]
            means = [p[1] for p in points]
            stds = [p[2] for p in points]
            color = colors[label]
            ax.errorbar(xs, means, yerr=stds, marker=markers[label], markersize=5, capsize=3, label=label,
                        color=color, alpha=0.9)
            if len(xs) > 1 and any(stds):
                ax.fill_between(xs, [m - s for m, s in zip(means, stds, strict=True)], [m + s for m, s in zip(means, stds, strict=True)],
                                color=color, alpha=0.15, linewidth=0)
        base = [float(r[f"baseline/{metric}"]) for r in rows if _is_number(r.get(f"baseline/{metric}"))]
        if base:
            ax.axhline(sum(base) / len(base), color="gray", linestyle="--", linewidth=1, label="unedited")
        if log_x:
            ax.set_xscale("log")
            if len(xs_all) <= 12:
                ax.set_xticks(xs_all)
                ax.set_xticklabels([f"{v * 100:g}%" for v in xs_all], fontsize=8)
                ax.minorticks_off()
        ax.set_xlabel(xlabel)
        ax.set_ylabel(metric.rsplit("/", 1)[-1])
        ax.set_title(_panel_title(metric), fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    for index in range(len(metrics), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    seeds = {r.get("seed") for r in rows}
    fig.suptitle(title or f"metric vs {xlabel} (mean ± std over {len(seeds)} seed(s))", fontsize=11)
    return _save(fig, path)


def _as_metric_list(metric: str | Sequence[str]) -> list[str]:
    return [metric] if isinstance(metric, str) else list(metric)


def plot_metric_vs_topk(rows: Sequence[Mapping], metric: str | Sequence[str], path: str | Path, *,
                        title: str | None = None) -> Path:
    """The paper's pruning figure: ``metric`` (one panel per metric, e.g. math and non-math side by
    side) against top-K on a log axis, one line per method (+ filter etc. where they vary), mean ±
    std over seeds as error bars and a band; the unedited model's mean as a dashed line."""
    return _plot_vs(rows, "top_k", _as_metric_list(metric), path, log_x=True, title=title, xlabel="top-K (fraction)")


def plot_metric_vs_scalar(rows: Sequence[Mapping], metric: str | Sequence[str], path: str | Path, *,
                          title: str | None = None) -> Path:
    """The scaling study: ``metric`` against the scale factor, one line per method (+ top-K, filter
    where they vary), mean ± std over seeds; the unedited model as a dashed line."""
    return _plot_vs(rows, "scalar", _as_metric_list(metric), path, log_x=False, title=title, xlabel="scale factor s")


def _per_layer_entries(data: Any) -> list[tuple[str, Any, dict[str, float]]]:
    """Normalise summaries / results / tidy rows / {label: summary} into (label, top_k, per_layer)."""
    if isinstance(data, Mapping) and "per_layer" in data:
        return [(str(data.get("method") or "selection"), data.get("top_k"), dict(data["per_layer"]))]
    if isinstance(data, Mapping):
        out = []
        for label, item in data.items():
            for _, top_k, layers in _per_layer_entries(item):
                out.append((str(label), top_k, layers))
        return out
    out = []
    for item in data:
        if "selection" in item and isinstance(item["selection"], Mapping):
            sel, point = item["selection"], item.get("point") or {}
            rowlike = {**point, "method": point.get("method", sel.get("method"))}
            layers = dict(sel.get("per_layer") or {})
            top_k = point.get("top_k", sel.get("top_k"))
        elif "per_layer" in item:
            rowlike, layers, top_k = item, dict(item["per_layer"]), item.get("top_k")
        else:
            rowlike = item
            layers = {k[len("per_layer/") :]: v for k, v in item.items() if k.startswith("per_layer/") and _is_number(v)}
            top_k = item.get("top_k")
        if layers:
            out.append((rowlike, top_k, layers))
    if out and not isinstance(out[0][0], str):
        rows = [e[0] for e in out]
        fields = [f for f in _label_fields(rows, exclude=["top_k", "scalar", "intervention"])]
        out = [(_label(e[0], fields), e[1], e[2]) for e in out]
    return out


def plot_per_layer(data: Any, path: str | Path, *, top_k: float | None = None, normalize: bool = False,
                   title: str | None = None) -> Path:
    """Bars of selected counts per decoder block, one bar group per method (label).

    ``data``: one ``selection`` summary, a list of them, ``{label: summary}``, results dicts or tidy
    rows. Per label the entries at ``top_k`` (default: that label's largest top-K) are averaged over
    repeats. ``normalize=True`` plots each label's share of its selection per block instead."""
    plt = _pyplot()
    entries = _per_layer_entries(data)
    if not entries:
        raise ValueError("plot_per_layer: no per_layer counts in the data")
    by_label: dict[str, list[tuple[Any, dict]]] = {}
    for label, k, layers in entries:
        by_label.setdefault(label, []).append((k, layers))
    bars: dict[str, dict[str, float]] = {}
    chosen_k: dict[str, Any] = {}
    for label, items in by_label.items():
        ks = [k for k, _ in items if _is_number(k)]
        want = top_k if top_k is not None else (max(ks) if ks else None)
        picked = [layers for k, layers in items if want is None or k == want] or [layers for _, layers in items]
        chosen_k[label] = want
        keys = {key for layers in picked for key in layers}
        mean = {key: sum(float(layers.get(key, 0)) for layers in picked) / len(picked) for key in keys}
        if normalize:
            total = sum(mean.values())
            mean = {key: (v / total if total else 0.0) for key, v in mean.items()}
        bars[label] = mean
    layer_keys = sort_layer_keys({key for mean in bars.values() for key in mean})
    width = 0.8 / len(bars)
    fig, ax = plt.subplots(figsize=(min(18.0, max(6.0, 0.25 * len(layer_keys) * len(bars) + 2)), 3.9))
    for i, (label, mean) in enumerate(sorted(bars.items())):
        xs = [j + (i - (len(bars) - 1) / 2) * width for j in range(len(layer_keys))]
        k = chosen_k[label]
        shown = label if k is None else f"{label}, K={k:g}"
        ax.bar(xs, [mean.get(key, 0.0) for key in layer_keys], width=width, label=shown)
    ax.set_xticks(range(len(layer_keys)))
    ax.set_xticklabels(layer_keys)
    ax.set_xlabel("decoder block")
    ax.set_ylabel("share of selection" if normalize else "selected weights")
    ax.set_title(title or "selection per decoder block (mean over repeats)", fontsize=11)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def plot_data_efficiency(rows: Sequence[Mapping], path: str | Path, *, title: str | None = None) -> Path:
    """The data-efficiency figure (M and math top-K sets): see :func:`mathneuro.efficiency.plot_data_efficiency`."""
    from mathneuro.efficiency import plot_data_efficiency as plot

    return plot(rows, path, title=title)


def plot_overlap_heatmap(matrix: Mapping, path: str | Path, *, key: str = "jaccard", title: str | None = None) -> Path:
    """A heatmap of an :func:`mathneuro.analysis.overlap_matrix` (``key``: jaccard or a_in_b)."""
    plt = _pyplot()
    labels = list(matrix["labels"])
    values = [[(v if v is not None else float("nan")) for v in row] for row in matrix[key]]
    size = max(3.5, 0.7 * len(labels) + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(values, vmin=0.0, vmax=1.0, cmap="viridis")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=8)
    for i, row in enumerate(values):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if v < 0.6 else "black")
    fig.colorbar(image, ax=ax, fraction=0.046)
    ax.set_title(title or ("Jaccard overlap" if key == "jaccard" else "share of row inside column"), fontsize=11)
    return _save(fig, path)


# ------------------------------------------------------------------------------------------ report
def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def _distinct(rows: Sequence[Mapping], field: str) -> list:
    values = {_hashable(r.get(field)) for r in rows}
    return sorted(values, key=_sort_key)


def _make_figures(rows: list[dict], metrics: list[str], out: Path) -> tuple[dict[str, str], list[str]]:
    figures: dict[str, str] = {}
    notes: list[str] = []
    for intervention in _distinct(rows, "intervention"):
        sub = [r for r in rows if _hashable(r.get("intervention")) == intervention]
        tag = _safe_name(str(intervention)) if intervention is not None else "all"
        plotted = [m for m in metrics if any(_is_number(r.get(m)) for r in sub)]
        if not plotted:
            continue
        topks = [v for v in _distinct(sub, "top_k") if _is_number(v) and v > 0]
        scalars = [v for v in _distinct(sub, "scalar") if _is_number(v)]
        if len(topks) > 1 or (topks and len(scalars) <= 1):
            name = f"{tag}_vs_topk"
            figures[name] = str(plot_metric_vs_topk(sub, plotted, out / f"{name}.png",
                                                    title=f"{intervention}: metric vs top-K (mean ± std over seeds)"))
        skipped = sum(1 for r in sub if not (_is_number(r.get("top_k")) and r["top_k"] > 0))
        if skipped:
            notes.append(f"{skipped} {intervention} point(s) without a positive top_k are not in {tag}_vs_topk.png")
        if len(scalars) > 1:
            name = f"{tag}_vs_scalar"
            figures[name] = str(plot_metric_vs_scalar(sub, plotted, out / f"{name}.png",
                                                      title=f"{intervention}: metric vs scale factor (mean ± std over seeds)"))
    if any(k.startswith("per_layer/") for r in rows for k in r):
        figures["per_layer"] = str(plot_per_layer(rows, out / "per_layer.png"))
    return figures, notes


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
                if f"{m}/mean" in entry:
                    item[m] = f"{entry[f'{m}/mean']:.4g} ± {entry[f'{m}/std']:.2g}"
            item["n"] = entry.get("n")
            display.append(item)
        parts.append(markdown_table(display, by + [m for m in metrics] + ["n"]))
    if rows and any("selection/num_selected" in r for r in rows):
        parts.append("\n## Selection size (mean over seeds)\n")
        by = [f for f in GROUP_FIELDS if len({_hashable(r.get(f)) for r in rows}) > 1] or ["method"]
        sel_rows: dict[tuple, dict] = {}
        sel_cols = ["selection/num_selected", "selection/fraction_of_model", "selection/fraction_of_scored"]
        for field in sel_cols:
            for agg in aggregate(rows, by, field):
                key = tuple(agg[k] for k in by)
                sel_rows.setdefault(key, dict(zip(by, key, strict=True)))[field] = agg["mean"]
        table = [sel_rows[k] for k in sorted(sel_rows, key=lambda k: tuple(_sort_key(v) for v in k))]
        parts.append(markdown_table(table, by + sel_cols))
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
        parts.append("\n## All points\n")
        parts.append(markdown_table(rows))
    return "\n".join(parts)


def write_report(sweep_dir: str | Path, out_dir: str | Path | None = None, *,
                 metrics: Sequence[str] | None = None) -> dict:
    """Write ``points.csv``, ``summary.md`` and PNG figures for a sweep (default ``<sweep>/report``).

    Figures: ``<intervention>_vs_topk.png`` (every metric, math and non-math side by side),
    ``<intervention>_vs_scalar.png`` when several scale factors were run, ``per_layer.png``.
    Returns ``{"csv", "markdown", "figures": {name: path}, "rows", "missing", "metrics", "comparison"}``.
    Raises FileNotFoundError for a missing dir and ValueError when no complete point exists."""
    sweep = Path(sweep_dir)
    complete, missing = load_results(sweep)
    if not complete:
        where = f" ({len(missing)} missing or incomplete)" if missing else ""
        raise ValueError(f"no complete results.json under {sweep}{where}")
    out = Path(out_dir) if out_dir is not None else sweep / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows = tidy_rows(complete)
    chosen = list(metrics) if metrics else metric_names(rows)
    unknown = [m for m in chosen if not any(m in r for r in rows)]
    if unknown:
        raise ValueError(f"metrics not found in any result: {', '.join(unknown)}; have: {', '.join(metric_names(rows))}")
    csv_path = write_csv(rows, out / "points.csv")
    figures, notes = _make_figures(rows, chosen, out)
    md = _summary_markdown(sweep, rows, missing, chosen, figures, notes, out)
    from mathneuro.efficiency import write_data_efficiency  # saved selections at several N / seeds
    from mathneuro.paired import write_paired  # paired.csv from per-example records, if any

    paired, efficiency = write_paired(complete, out), write_data_efficiency(complete, out)
    figures.update(efficiency["figures"] if efficiency else {})
    md_path = out / "summary.md"
    md_path.write_text(md + "\n" + paired["markdown"] + ("\n" + efficiency["markdown"] if efficiency else ""))
    return {"csv": str(csv_path), "markdown": str(md_path), "figures": figures, "rows": rows,
            "missing": missing, "metrics": chosen, "comparison": comparison_rows(rows, chosen),
            "paired": paired["rows"], "paired_csv": paired["csv"], "paired_notes": paired["notes"],
            "data_efficiency": efficiency["rows"] if efficiency else [],
            "data_efficiency_csv": efficiency["csv"] if efficiency else None}


# ------------------------------------------------------------------------------------------- wandb
def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, default=str)


def wandb_table_columns(rows: Sequence[Mapping], metrics: Sequence[str]) -> list[str]:
    """Key columns first (method, filter, top_k, scalar, seed, …), then selection numbers, metrics,
    baselines and deltas of those metrics."""
    keys = [c for c in WANDB_KEY_COLUMNS if any(c in r for r in rows)]
    keys += [c for c in ("objective", *SELECTION_COLUMNS) if any(c in r for r in rows)]
    for m in metrics:
        keys += [c for c in (m, f"baseline/{m}", f"delta/{m}") if any(c in r for r in rows)]
    return keys


def log_report_to_wandb(report: Mapping, run: Any) -> None:
    """Log a :func:`write_report` result to a W&B run: each figure as ``report/<name>`` image, the
    points as table ``report/points``, the over-seed comparison as ``report/comparison`` and the
    paired differences as ``report/paired``.

    No-op if wandb is not importable or ``run`` is None; any W&B error becomes a warning."""
    if run is None:
        return
    try:
        import wandb
    except Exception:  # noqa: BLE001 - wandb is optional at this point
        return
    try:
        payload: dict[str, Any] = {}
        for name, path in (report.get("figures") or {}).items():
            payload[f"report/{name}"] = wandb.Image(str(path))
        rows = list(report.get("rows") or [])
        metrics = list(report.get("metrics") or metric_names(rows))
        if rows:
            cols = wandb_table_columns(rows, metrics)
            payload["report/points"] = wandb.Table(columns=cols, data=[[_cell(r.get(c)) for c in cols] for r in rows])
        comp = list(report.get("comparison") or [])
        if comp:
            ccols = columns_of(comp)
            payload["report/comparison"] = wandb.Table(columns=ccols, data=[[_cell(r.get(c)) for c in ccols] for r in comp])
        if report.get("paired"):
            from mathneuro.paired import COLUMNS, EXTRA_COLUMNS

            pcols = [*COLUMNS, *EXTRA_COLUMNS]
            payload["report/paired"] = wandb.Table(columns=pcols, data=[[_cell(r.get(c)) for c in pcols]
                                                                        for r in report["paired"]])
        if payload:
            run.log(payload)
        summary = getattr(run, "summary", None)
        if summary is not None:
            summary["report/complete_points"] = len(rows)
            summary["report/missing_points"] = len(report.get("missing") or [])
    except Exception as err:  # noqa: BLE001 - reporting must never break the caller
        warnings.warn(f"W&B logging of the report failed: {err}", stacklevel=2)
