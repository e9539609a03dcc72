"""How much the forward pass's dtype moves MathNeuro's selection: the same samples, scored once with the
model in float32 and once in bfloat16 (the default on CUDA, and the fast choice on CPUs with bf16 units).

Takes two finished points (run folders) of the same model, task and filter draws that differ in
``model.dtype``; reads each one's statistics from the cache by the keys in its ``results.json`` and
recomputes, for every ``--top-k``, M = top-K(math) \\ top-K(filter) and the math top-K set from each,
with |W| rounded to that point's dtype (as its run did). Reports sizes, Jaccard and the share of the
first point's set found in the second. The first top-K's M size is checked against the size the
point's own run recorded.

    .venv/bin/python experiments/benchmarks/dtype_selection_overlap.py RUN_FLOAT32 RUN_BF16 --top-k 0.05,0.15 \\
        --out experiments/results/claims_1p5b/dtype_selection_overlap.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from mathneuro.methods import mathneuro_selection, wanda_selection
from mathneuro.models import load_model
from mathneuro.models.embedded import cache_root
from mathneuro.models.targets import find_target_linears, weight_parameters
from mathneuro.report.overlap import overlap
from mathneuro.statistics.cache import StatisticsCache

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def point_inputs(run: Path, cache: StatisticsCache) -> dict:
    """The dtype, model path, recorded selection and the (task, filter) statistics of one finished point."""
    results = json.loads((run / "results.json").read_text())
    stats = {}
    for entry in results["statistics"]:
        loaded = cache.load(entry["key"], kind=entry["kind"])
        if loaded is None:
            raise SystemExit(f"{run}: statistics {entry['key']} ({entry['dataset']}) are not in {cache.root}")
        stats[entry["dataset"]] = loaded
    if len(stats) != 2:
        raise SystemExit(f"{run}: expected one task and one filter statistics entry, found {sorted(stats)}")
    task = results["config"]["task"]["name"]
    (filt,) = [name for name in stats if name != task]
    return {"dtype": results["config"]["model"]["dtype"], "model": results["config"]["model"]["name_or_path"],
            "top_k": results["config"]["top_k"], "num_selected": results["selection"]["num_selected"],
            "task": stats[task], "filter": stats[filt], "datasets": [task, filt]}


def selections(weights: dict[str, torch.Tensor], point: dict, top_k: float) -> tuple[dict, dict]:
    """(M, math top-K set) per weight matrix for one point at ``top_k``, |W| in the point's dtype: the
    runner's own selections (the math top-K set is what ``wanda`` selects), one matrix at a time so that
    only one rounded copy is held."""
    m, math = {}, {}
    for name, weight in weights.items():
        one = {name: weight.to(DTYPES[point["dtype"]])}
        m[name] = mathneuro_selection(one, point["task"], [point["filter"]], top_k).masks[name]
        math[name] = wanda_selection(one, point["task"], top_k).masks[name]
    return m, math


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_a", type=Path, help="a finished point (its folder holds results.json)")
    parser.add_argument("run_b", type=Path, help="the same point run in another model.dtype")
    parser.add_argument("--top-k", default="0.05,0.15", help="comma-separated top-K fractions")
    parser.add_argument("--cache", default=None, help="the mathneuro cache folder (default: mathneuro's)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the numbers here as JSON")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    cache = StatisticsCache(cache_root(args.cache) / "statistics")
    a, b = point_inputs(args.run_a, cache), point_inputs(args.run_b, cache)
    if a["model"] != b["model"] or a["datasets"] != b["datasets"]:
        raise SystemExit(f"the points differ in more than the dtype: {a['model']} {a['datasets']} vs "
                         f"{b['model']} {b['datasets']}")
    start = time.perf_counter()
    model, _ = load_model(a["model"], dtype="float32", device="cpu")
    weights = {name: w.detach() for name, w in weight_parameters(find_target_linears(model)).items()}
    out = {"runs": [str(args.run_a), str(args.run_b)], "dtypes": [a["dtype"], b["dtype"]],
           "model": a["model"], "datasets": a["datasets"], "top_k": {}}
    for top_k in [float(x) for x in args.top_k.split(",")]:
        m_a, math_a = selections(weights, a, top_k)
        m_b, math_b = selections(weights, b, top_k)
        row = {"M": overlap(m_a, m_b), "math_top_k": overlap(math_a, math_b)}
        for point, m, key in ((a, m_a, "a"), (b, m_b, "b")):
            if point["top_k"] == top_k:  # the run's own M size, as a check of this recomputation
                row[f"recorded_size_{key}"] = point["num_selected"]
                row[f"size_matches_{key}"] = sum(int(x.sum()) for x in m.values()) == point["num_selected"]
        out["top_k"][str(top_k)] = row
        print(f"top_k {top_k}: M {row['M']['size_a']:,} ({a['dtype']}) vs {row['M']['size_b']:,} ({b['dtype']}), "
              f"Jaccard {row['M']['jaccard']:.3f}, share of the {a['dtype']} M in the {b['dtype']} M "
              f"{row['M']['a_in_b']:.3f}; math top-K Jaccard {row['math_top_k']['jaccard']:.3f}")
    out["seconds"] = round(time.perf_counter() - start, 1)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
