"""Tables and figures of `experiments/studies/reproduce.sh` (issue 6) from its sweep folders.

    .venv/bin/python experiments/studies/summarise_reproduce.py outputs/sweeps/reproduce experiments/results/reproduce

Writes ``tables.md`` (every table of experiments/studies/reproduce_0.5b.md and smollm2.md), ``grid_points.csv``,
``paper_tasks_points.csv`` and the report's figures. Stages that have not run are skipped, partial stages are tabulated
as far as they go (the tables say how many seeds each cell has).
"""

from __future__ import annotations

import argparse
import csv
import math
import statistics
from pathlib import Path

from mathneuro.report import (
    comparison_rows,
    load_results,
    plot_data_efficiency,
    plot_metric_vs_topk,
    plot_per_layer,
    tidy_rows,
    write_csv,
)
from mathneuro.report.efficiency import efficiency_table

GRID_METRICS = {"math/arith/exact_match": "arith", "nonmath/mc/acc": "MC acc",
                "nonmath/ppl/word_perplexity": "word ppl"}
PAPER_METRICS = {"math/gsm8k_gen/exact_match": "GSM8K", "nonmath/race/acc": "RACE acc", "nonmath/mmlu/acc": "MMLU acc"}
SCALE_METRICS = {"math/arith/exact_match": "arith (test)", "math/gsm8k_gen/exact_match": "GSM8K",
                 "nonmath/mc/acc": "MC acc"}


MAIN_DTYPE = "bfloat16"  # the sweeps' model dtype; points run in another dtype say so in their label


def label(row: dict) -> str:
    """Method name as the tables use it: the filter only where it changes the method, LAPE's top-K
    rule where it is not the original's (``lape (candidates)``: top_k as a share of the candidates),
    and the model dtype where it is not the sweeps' (``lape [float32]``)."""
    if row["method"] == "mathneuro" and row.get("filter") != "race":
        name = f"mathneuro ({row.get('filter')} filter)"
    elif row["method"] == "lape" and row.get("share", "all") != "all":
        name = f"lape ({row['share']})"
    else:
        name = row["method"]
    dtype = row.get("dtype", MAIN_DTYPE)
    return name if dtype == MAIN_DTYPE else f"{name} [{dtype}]"


LAPE_FIELDS = ("num_neurons", "num_candidates", "num_kept", "saturated", "saturation_top_k")


def _number(text: str):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"True": True, "False": False}.get(text, text)


def rows_of_csv(path: Path) -> list[dict]:
    """Rows of an earlier ``grid_points.csv`` (empty cells left out). LAPE rows from before
    ``method.share`` existed used the candidates' share, so they are labelled ``lape (candidates)``."""
    rows = []
    with path.open(newline="") as fh:
        for raw in csv.DictReader(fh):
            row = {k: _number(v) for k, v in raw.items() if v != ""}
            if row["method"] == "lape" and "share" not in row:
                row["share"] = "candidates"
            row["label"] = label(row)
            rows.append(row)
    return rows


def merge_rows(new: list[dict], old: list[dict]) -> list[dict]:
    """``new`` plus the ``old`` rows whose point (model, filter, method, share, top_k, seed) ``new`` lacks."""
    def key(r: dict) -> tuple:
        return tuple(str(r.get(k)) for k in ("model", "filter", "method", "share", "top_k", "seed"))

    have = {key(r) for r in new}
    return new + [r for r in old if key(r) not in have]


def rows_of(path: Path) -> list[dict]:
    if not path.is_dir():
        return []
    complete, missing = load_results(path)
    if missing:
        print(f"{path}: {len(missing)} points missing or incomplete")
    rows = tidy_rows(complete)
    for row, result in zip(rows, complete, strict=True):
        row["dtype"] = ((result.get("config") or {}).get("model") or {}).get("dtype", MAIN_DTYPE)
        lape = (result.get("selection") or {}).get("lape") or {}
        row.update({f"lape/{k}": lape[k] for k in LAPE_FIELDS if k in lape})
        row["label"] = label(row)
        row["_result"] = result
    return rows


def plot_row(row: dict) -> dict:
    """A tidy row for the report's plots: the table's method label, no helper fields."""
    plain = {k: v for k, v in row.items() if k not in ("_result", "label", "share", "dtype")}  # both are in the label
    return {**plain, "method": row["label"], "filter": None}


def cell(mean: float | None, std: float | None, n: int, fmt: str = ".3f") -> str:
    if mean is None or not math.isfinite(mean):
        return "–"
    text = f"{mean:{fmt}}"
    if n > 1:
        text += f" ± {std:{fmt}}"
    return text


def baseline_of(rows: list[dict], metric: str, dtype: str | None = None) -> float | None:
    """The unedited model's ``metric`` in ``dtype`` (default: the main one; other dtypes have their own)."""
    want = dtype or MAIN_DTYPE
    values = [r[f"baseline/{metric}"] for r in rows if f"baseline/{metric}" in r and r.get("dtype", MAIN_DTYPE) == want]
    return values[0] if values else None


def other_baselines(rows: list[dict], metrics: dict[str, str]) -> str:
    """One line per dtype other than the main one: the unedited model's values in that dtype."""
    lines = []
    for dtype in sorted({r.get("dtype", MAIN_DTYPE) for r in rows} - {MAIN_DTYPE}):
        values = ", ".join(f"{name} {_fmt_base(baseline_of(rows, m, dtype))}" for m, name in metrics.items())
        lines.append(f"Rows marked [{dtype}] ran the model in {dtype}; its unedited values: {values}.")
    return ("\n" + "\n".join(lines) + "\n") if lines else ""


def comparison_table(rows: list[dict], metrics: dict[str, str], by: list[str], title: str) -> str:
    """Markdown: one line per group, mean ± std over seeds per metric, plus % of the model."""
    table = comparison_rows(rows, [*metrics, "selection/fraction_of_model", "selection/num_selected"], by=by)
    heads = [*by, "seeds", "% of model",
             *(f"{name} ({_fmt_base(baseline_of(rows, m))})" for m, name in metrics.items())]
    lines = [f"**{title}**", "", "| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for entry in table:
        frac = entry.get("selection/fraction_of_model/mean")
        method_cells = [str(entry[k]) for k in by]
        if str(entry.get("label", entry.get("method"))).startswith("lape"):
            size = f"{entry['selection/num_selected/mean']:.0f} neurons"
        else:
            size = f"{100 * frac:.2f}" if frac is not None else "–"
        cells = [*method_cells, str(entry["n"]), size]
        for m in metrics:
            fmt = ".3g" if "perplexity" in m else ".3f"
            cells.append(cell(entry.get(f"{m}/mean"), entry.get(f"{m}/std"), entry["n"], fmt))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" + other_baselines(rows, metrics)


def _fmt_base(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3g}" if value > 10 else f"{value:.3f}"


def stage_costs(stages: dict[str, list[dict]]) -> str:
    """Median seconds per stage and the largest peak RSS seen, per sweep stage."""
    names = ["baseline_evaluation", "identification", "intervention", "evaluation", "total"]
    lines = ["| stage of the study | points | " + " | ".join(f"{n} (s, median)" for n in names)
             + " | peak RSS (MB) |", "|" + "---|" * (len(names) + 3)]
    for stage, rows in stages.items():
        rows = [r for r in rows if "_result" in r]  # rows read from an earlier CSV have no timings
        if not rows:
            continue
        timings = [r["_result"].get("timings", {}) for r in rows]
        cells = []
        for n in names:
            vals = [t[n] for t in timings if n in t]
            cells.append(f"{statistics.median(vals):.1f}" if vals else "–")
        peaks = [v.get("rss_mb", 0) for r in rows for v in (r["_result"].get("peak_memory") or {}).values()]
        cells.append(f"{max(peaks):.0f}" if peaks else "–")
        lines.append(f"| {stage} | {len(rows)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def mean_shares(rows: list[dict], field: str, top_k: float = 0.15) -> dict[str, dict[str, float]]:
    """Per label (LAPE excluded), the share of the selection in each key of the selection summary's
    ``field`` (``per_layer`` or ``per_module``), averaged over seeds; ``per_layer`` keeps numbered blocks."""
    by_label: dict[str, list[dict[str, float]]] = {}
    for r in rows:
        if r["label"].startswith("lape") or r["top_k"] != top_k:
            continue
        prefix = f"{field}/"  # the tidy row's per_layer/<block> or per_module/<type> columns
        counts = {k[len(prefix):]: v for k, v in r.items()
                  if k.startswith(prefix) and (field != "per_layer" or k[len(prefix):].isdigit())}
        total = sum(counts.values())
        by_label.setdefault(r["label"], []).append({k: v / total for k, v in counts.items()})
    keys = sorted({k for shares in by_label.values() for s in shares for k in s})
    return {name: {k: statistics.mean(s.get(k, 0.0) for s in shares) for k in keys}
            for name, shares in sorted(by_label.items())}


def spread_over_blocks(rows: list[dict], top_k: float = 0.15) -> str:
    """How evenly each method's selection spreads over the decoder blocks (all blocks have equal size)."""
    lines = ["| method | top-K | blocks | smallest block share | largest block share | max / min |",
             "|---|---|---|---|---|---|"]
    for name, mean in mean_shares(rows, "per_layer", top_k).items():
        lo, hi = min(mean.values()), max(mean.values())
        lines.append(f"| {name} | {top_k} | {len(mean)} | {100 * lo:.2f} % | {100 * hi:.2f} % | {hi / lo:.2f} |")
    return "\n".join(lines) + "\n"


def module_shares(rows: list[dict], top_k: float = 0.15) -> str:
    """Share of each method's selection per module type (q_proj, ..., down_proj), mean over seeds."""
    shares = mean_shares(rows, "per_module", top_k)
    if not shares:
        return ""
    types = list(next(iter(shares.values())))
    lines = ["| method | " + " | ".join(types) + " |", "|---|" + "---|" * len(types)]
    for name, mean in shares.items():
        lines.append(f"| {name} | " + " | ".join(f"{100 * mean[t]:.1f} %" for t in types) + " |")
    return "\n".join(lines) + "\n"


def lape_table(rows: list[dict]) -> str:
    """LAPE's selection per top-K: candidates, neurons kept by the rule, math neurons, and in how many
    draws every candidate was kept (saturation: a larger top-K selects nothing new)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if r["method"] == "lape" and "lape/num_candidates" in r:
            groups.setdefault((r["label"], r["top_k"]), []).append(r)
    if not groups:
        return ""
    lines = ["| label | top_k | seeds | MLP neurons | candidates | kept by the rule | math neurons (pruned) "
             "| saturated | saturated from top_k |", "|---|---|---|---|---|---|---|---|---|"]
    for (name, top_k), rs in sorted(groups.items()):
        def mean(key: str, rs: list[dict] = rs) -> str:
            return f"{statistics.mean(r[key] for r in rs):,.0f}"
        sat = sum(bool(r["lape/saturated"]) for r in rs)
        start = statistics.mean(r["lape/saturation_top_k"] for r in rs)
        lines.append(f"| {name} | {top_k} | {len(rs)} | {rs[0]['lape/num_neurons']:,} | {mean('lape/num_candidates')} "
                     f"| {mean('lape/num_kept')} | {mean('selection/num_selected')} | {sat} of {len(rs)} "
                     f"| {start:.4f} |")
    return "\n".join(lines) + "\n"


def data_efficiency_table(rows: list[dict], figure: Path) -> str:
    """Overlap of two independent draws for M and for the math top-K sets (selection_topk.safetensors,
    or wanda points of the same N and seed); top-K columns show "–" where neither was saved."""
    overlaps = efficiency_table([r["_result"] for r in rows])
    if not overlaps:
        return ""
    plot_data_efficiency(overlaps, figure, title="MathNeuro (top-K 15 %): two independent identifications")
    ref = max(r["num_samples"] for r in overlaps)
    lines = ["| N samples | identifications | Jaccard of two draws (M) | share of one draw in the other (M) | "
             f"share of M(N={ref}) found | Jaccard (math top-K) | share of one draw in the other (math top-K) |",
             "|---|---|---|---|---|---|---|"]

    def f(row: dict, key: str) -> str:
        v = row.get(key)
        return "–" if v is None else f"{v:.3f}"

    for r in overlaps:
        lines.append(f"| {r['num_samples']} | {r['seeds']} | {f(r, 'jaccard_mean')} | {f(r, 'a_in_b_mean')} "
                     f"| {f(r, 'ref_in_n_mean')} | {f(r, 'topk_jaccard_mean')} | {f(r, 'topk_a_in_b_mean')} |")
    return "\n".join(lines) + "\n"


def scaling_search_table(folder: Path) -> str:
    import yaml

    lines = []
    for method_dir in sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []:
        best_file = method_dir / "optimization_results.yaml"
        rows = rows_of(method_dir)
        trials = sorted((r["scalar"], r.get("math/arith/exact_match"), r.get("nonmath/mc/acc")) for r in rows)
        best = yaml.safe_load(best_file.read_text()) if best_file.is_file() else None
        trial_text = ", ".join(f"s={s:.3f}: arith {a:.2f} / MC {m:.3f}" for s, a, m in trials)
        base = baseline_of(rows, "math/arith/exact_match")
        if best:
            lines.append(f"- **{method_dir.name}** (validation arithmetic, unedited {base:.2f}): best "
                         f"s = {best['best_params']['intervention.scalar']:.3f} (objective {best['best_value']:.3f}); "
                         f"trials: {trial_text}")
        else:
            lines.append(f"- **{method_dir.name}**: search unfinished; trials: {trial_text}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--title", default="Qwen2.5-Coder-0.5B-Instruct")
    parser.add_argument("--grid-csv", type=Path, default=None,
                        help="an earlier grid_points.csv: its points that ROOT/grid lacks are kept (e.g. when "
                             "only the LAPE points were rerun)")
    parser.add_argument("--main-dtype", default=MAIN_DTYPE,
                        help="the sweeps' model dtype; points in another dtype are labelled with theirs")
    args = parser.parse_args()
    globals()["MAIN_DTYPE"] = args.main_dtype
    out: Path = args.out
    title: str = args.title
    out.mkdir(parents=True, exist_ok=True)
    grid = rows_of(args.root / "grid")
    if args.grid_csv is not None:
        grid = merge_rows(grid, rows_of_csv(args.grid_csv))
    paper = rows_of(args.root / "paper_tasks")
    one = rows_of(args.root / "one_sample")
    scale = rows_of(args.root / "scaling_test")
    parts = ["# Tables of experiments/studies/reproduce.sh (generated by summarise_reproduce.py)\n"]
    if grid:
        write_csv([{k: v for k, v in r.items() if k != "_result"} for r in grid], out / "grid_points.csv")
        parts.append(comparison_table(grid, GRID_METRICS, ["label", "top_k"],
                                      "Pruning sweep (probes; mean ± std over bootstrap draws)"))
        lape = lape_table(grid)
        if lape:
            parts.append("**LAPE's selection** (mean over draws; top_k is a share of all MLP neurons, "
                         "`lape (candidates)`: of the candidates)\n\n" + lape)
        plain = [plot_row(r) for r in grid]
        # perplexity is in the table: Wanda's 1e7 would flatten every other line
        plot_metric_vs_topk(plain, ["math/arith/exact_match", "nonmath/mc/acc"], out / "prune_vs_topk.png",
                            title=f"{title}: pruning")
        top = [r for r in plain if r["top_k"] == 0.15 and r["method"].startswith("mathneuro")]
        plot_per_layer(top, out / "per_layer.png", top_k=0.15)
        parts.append("**Spread of the selection over decoder blocks** (share of the selection per block, "
                     "mean over seeds; even spread = 1 / blocks)\n\n" + spread_over_blocks(grid))
        parts.append("**Share of the selection per module type** (top-K 15 %, mean over seeds)\n\n"
                     + module_shares(grid))
    if one:
        full = [r for r in grid if r["label"] == "mathneuro" and r["top_k"] in {x["top_k"] for x in one}]
        parts.append(comparison_table(one + full, GRID_METRICS, ["num_samples", "top_k"],
                                      "MathNeuro identified from one sample, against the sweep's N (probes)"))
    if paper:
        write_csv([{k: v for k, v in r.items() if k != "_result"} for r in paper], out / "paper_tasks_points.csv")
        parts.append(comparison_table(paper, PAPER_METRICS, ["label", "top_k"],
                                      "Paper's tasks (seed 0): GSM8K test CoT 20, RACE-high test 10, MMLU test 57"))
    efficiency = rows_of(args.root / "data_efficiency")
    de = data_efficiency_table(efficiency, out / "data_efficiency.png")
    if de:
        parts.append("**Data efficiency (MathNeuro, top-K 15 %, RACE filter)**\n\n" + de)
    search = scaling_search_table(args.root / "scaling_search")
    if search.strip():
        parts.append("**Scaling search (Optuna TPE, s in [1.0, 1.5], top-K 5 %)**\n\n" + search)
    if scale:
        parts.append(comparison_table(scale, SCALE_METRICS, ["method", "scalar"],
                                      "Scaling on the test problems (mean ± std over seeds)"))
    stages = {"grid": grid, "paper_tasks": paper, "one_sample": one,
              "data_efficiency": efficiency,
              "scaling_search": rows_of(args.root / "scaling_search"), "scaling_test": scale}
    parts.append("**Cost per stage** (2 CPU cores shared by two sweeps at 1 thread each)\n\n" + stage_costs(stages))
    (out / "tables.md").write_text("\n".join(parts))
    print(f"wrote {out / 'tables.md'}")


if __name__ == "__main__":
    main()
