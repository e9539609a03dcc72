"""The rows of one or more ``paired.csv`` files that a claim rests on, as one markdown table.

    .venv/bin/python experiments/claims/paired_table.py experiments/results/reproduce_smollm2/paired/paired.csv \
        --metric arith/exact_match --metric mc/acc --top-k 0.15

Each row: the model, the edit (method, filter, intervention, s, top-K), the reference (baseline or
random), the task and metric, seeds, examples, and the paired difference with its 95 % interval;
"*" marks an interval that excludes 0. Per-subject rows of a group (MMLU's 57) are left out unless
named with ``--metric``.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path


def read_rows(paths: list[str]) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for path in paths:
        with Path(path).open(newline="") as fh:
            rows.extend(csv.DictReader(fh))
    return rows


def keep(row: dict[str, str], metrics: list[str], top_ks: list[float]) -> bool:
    if metrics and f"{row['task']}/{row['metric']}" not in metrics:
        return False
    return not top_ks or any(abs(float(row["top_k"]) - k) < 1e-12 for k in top_ks)


def fmt(value: str) -> str:
    return f"{float(value):+.3f}"


def markdown(rows: list[dict[str, str]]) -> str:
    lines = ["| model | edit | vs | task / metric | seeds | n | paired diff [95 % CI] |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        edit = f"{r['method']} ({r.get('filter', '')} filter), {r.get('intervention', '')}"
        if r.get("intervention") == "scale":
            edit += f" s = {float(r['scalar']):g}"
        edit += f", K = {float(r['top_k']) * 100:g} %"
        low, high = float(r["ci_low"]), float(r["ci_high"])
        star = " *" if low > 0 or high < 0 else ""
        lines.append(f"| {r.get('model', '')} | {edit} | {r['reference']} | {r['task']} / {r['metric']} | {r['seeds']} "
                     f"| {r['n_examples']} | {fmt(r['diff'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]{star} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("paired_csv", nargs="+")
    p.add_argument("--metric", action="append", default=[],
                   help="task/metric to keep, e.g. arith/exact_match (repeatable)")
    p.add_argument("--top-k", action="append", type=float, default=[], help="top-K to keep (repeatable)")
    args = p.parse_args(argv)
    rows = [r for r in read_rows(args.paired_csv) if keep(r, args.metric, args.top_k)]
    if not rows:
        print("no rows match", file=sys.stderr)
        return 1
    rows.sort(key=lambda r: (r.get("model", ""), r["task"], r["metric"], float(r["top_k"]), r["method"],
                             r.get("filter", ""), r["reference"]))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
