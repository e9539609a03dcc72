"""The paper's figures from tidy rows: metric vs top-K / scale factor, per-layer spread, data
efficiency, overlap heatmaps (matplotlib, Agg backend, PNG)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mathneuro.methods.counts import sort_layer_keys
from mathneuro.report.tables import _hashable, aggregate
from mathneuro.results.schema import POINT_FIELDS, PointResult, coerce, is_number
from mathneuro.util.io import atomic_write


def _save(fig, path: str | Path) -> Path:
    """Lay out, write (creating folders) and close one figure; return its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path = Path(path)
    try:  # atomically: a reader (or a report cut short) never sees half a PNG
        atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format=path.suffix.lstrip(".") or "png"))
    finally:
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
        if value is None:  # a field this point's method has not (random has no LAPE ``share``)
            continue
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
                  if is_number(a[x])]
        if points:
            out[label] = sorted(points)
    return out


def _plot_vs(rows: Sequence[Mapping], x: str, metrics: Sequence[str], path: str | Path, *, log_x: bool,
             title: str | None, xlabel: str) -> Path:
    plt = _pyplot()
    rows = [r for r in rows if is_number(r.get(x)) and (not log_x or r[x] > 0)]
    metrics = [m for m in metrics if any(is_number(r.get(m)) for r in rows)]
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
                ax.fill_between(xs, [m - s for m, s in zip(means, stds, strict=True)],
                                [m + s for m, s in zip(means, stds, strict=True)],
                                color=color, alpha=0.15, linewidth=0)
        base = [float(r[f"baseline/{metric}"]) for r in rows if is_number(r.get(f"baseline/{metric}"))]
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


def _is_result_like(data: Any) -> bool:
    """A single result in one of the shapes :func:`mathneuro.results.schema.coerce` reads (not a ``{label: ...}``
    map)."""
    if isinstance(data, PointResult):
        return True
    return isinstance(data, Mapping) and (
        any(k in data for k in ("per_layer", "selection", "status", "metrics"))
        or any(str(k).startswith("per_layer/") for k in data))


def _per_layer_entries(data: Any) -> list[tuple[str, Any, dict[str, float]]]:
    """(label, top_k, per_layer) of every result in ``data``: one result or a list of them in any shape
    :func:`mathneuro.results.schema.coerce` reads, or ``{label: any of those}``."""
    if isinstance(data, Mapping) and not _is_result_like(data):
        return [(str(label), top_k, layers) for label, item in data.items()
                for _, top_k, layers in _per_layer_entries(item)]
    records = [coerce(item) for item in ([data] if _is_result_like(data) else data)]
    out = []
    for record in records:
        layers = {k: v for k, v in record.per_layer.items() if is_number(v)}
        if layers:
            out.append((record.point, record.point.get("top_k", record.selection.get("top_k")), layers))
    if out:
        rows = [e[0] for e in out]
        fields = _label_fields(rows, exclude=["top_k", "scalar", "intervention"])
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
        ks = [k for k, _ in items if is_number(k)]
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
    """Overlap of two independent identifications against N (log axis): for M (solid) and, where
    the rows have them, for the math top-K sets (dashed, same colour per measure): Jaccard (mean ±
    std over seed pairs), share of one draw's set in the other's, share of the reference N's set found."""
    plt = _pyplot()
    rows = sorted(rows, key=lambda r: r["num_samples"])
    if not rows:
        raise ValueError("plot_data_efficiency: no rows")
    fig, ax = plt.subplots(figsize=(6.2, 4.2))
    for prefix, style, name in (("", "-", "M"), ("topk_", "--", "math top-K")):
        pts = [r for r in rows if r.get(f"{prefix}jaccard_mean") is not None]
        if pts:
            xs = [r["num_samples"] for r in pts]
            ax.errorbar(xs, [r[f"{prefix}jaccard_mean"] for r in pts], yerr=[r.get(f"{prefix}jaccard_std") or 0.0
                        for r in pts], marker="o", capsize=3, linestyle=style, color="C0",
                        label=f"{name}: Jaccard, two draws")
            ax.plot(xs, [r[f"{prefix}a_in_b_mean"] for r in pts], marker="s", linestyle=style, color="C1",
                    label=f"{name}: share of one draw in the other")
        ref = [r for r in rows if r.get(f"{prefix}ref_in_n_mean") is not None]
        if ref:
            ax.plot([r["num_samples"] for r in ref], [r[f"{prefix}ref_in_n_mean"] for r in ref], marker="^",
                    linestyle=style, color="C2",
                    label=f"{name}: share of the N={ref[0][f'{prefix}ref_num_samples']} set found")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("samples per identification (N)")
    ax.set_ylabel("overlap")
    ax.set_title(title or "data efficiency of the identification (M solid, math top-K dashed)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path)


def plot_overlap_heatmap(matrix: Mapping, path: str | Path, *, key: str = "jaccard", title: str | None = None) -> Path:
    """A heatmap of an :func:`mathneuro.report.overlap.overlap_matrix` (``key``: jaccard or a_in_b)."""
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
