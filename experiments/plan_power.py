"""The power note of experiments/ANALYSIS_PLAN.md: what difference each planned size can detect.

    .venv/bin/python experiments/plan_power.py            # markdown tables on stdout

Inputs are the committed pilot results of issue 16 on Qwen2.5-Coder-1.5B
(``experiments/results/claims_1p5b/*/paired.csv`` and ``points.csv``); no per-example record of those
runs was committed, so the per-example variance of a paired difference is backed out of each row's
95 % percentile interval: ``v = n * ((ci_high - ci_low) / (2 * 1.96))**2``. For a 0/1 metric that is
the discordance rate (share of examples answered differently) minus the squared mean difference.
The draw-to-draw spread comes from ``points.csv``: the per-draw difference of two matched points
(same draw) varies over draws; with two draws its sample variance is an upper bound on the draw
component, since it also holds each draw's example noise.

The standard error of a D-draw, n-example paired mean difference is then
``se = sqrt(v / n + s_draw**2 / D)`` (examples are shared by the draws, so more draws do not shrink
``v / n``). From ``se``: the smallest difference a two-sided test at alpha = 0.05 detects with 80 %
power, ``(1.960 + 0.842) * se``; the power of two one-sided tests (alpha = 0.05 each, the 90 %
interval) to show equivalence within +-margin when the truth is 0, ``2 * Phi(margin / se - 1.645) - 1``;
and the smallest margin with 80 % equivalence power, ``(1.645 + 1.282) * se``.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path
from statistics import NormalDist

ROOT = Path(__file__).resolve().parent / "results" / "claims_1p5b"
Z = NormalDist()
Z975, Z95, Z90, Z80 = Z.inv_cdf(0.975), Z.inv_cdf(0.95), Z.inv_cdf(0.90), Z.inv_cdf(0.80)
#: Studies whose points are the same protocol on different draws (one file per draw).
MERGED = {"core_seed1": "core"}
DRAWS = 5
MARGINS = (0.03, 0.05)
#: (class, task, planned n): the comparisons of the plan whose variance the pilots measured.
PLANNED = (
    ("prune: M - random, non-math", "mmlu", 570),
    ("prune: M - random, non-math", "race", 300),
    ("prune: M - random, math", "gsm8k_cot", 300),
    ("scale: M - unedited, non-math", "mmlu", 570),
    ("scale: M - unedited, math", "gsm8k_cot", 300),
    ("scale: M - random, math", "gsm8k_cot", 300),
)
#: Unpiloted tasks: (task, planned n); their discordance is bracketed by the assumed rates below.
UNPILOTED = (("math500 (MATH)", 500), ("mathqa", 500), ("egsm", 300), ("hellaswag", 500), ("piqa", 500),
             ("winogrande", 500), ("mutual", 500))
ASSUMED_DISCORDANCE = (0.10, 0.20, 0.30)


def comparison_class(row: dict[str, str]) -> str | None:
    """The plan's comparison class of one ``paired.csv`` row (None: not one the plan needs)."""
    method, ref, kind = row["method"], row["reference"], row["intervention"]
    side = "math" if row["side"] == "math" else "non-math"
    if method != "mathneuro" or ref not in ("random", "baseline"):
        return None
    if kind == "prune" and ref == "random":
        return f"prune: M - random, {side}"
    if kind == "scale":
        return f"scale: M - {'unedited' if ref == 'baseline' else 'random'}, {side}"
    return None


def example_variances(root: Path) -> dict[tuple[str, str], list[tuple[float, int, int, str]]]:
    """``{(class, task): [(v, n, draws, source), ...]}`` backed out of every pooled paired.csv row."""
    out: dict[tuple[str, str], list] = defaultdict(list)
    for path in sorted(root.glob("**/paired.csv")):
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                cls = comparison_class(row)
                if cls is None or row["task"].startswith("mmlu_") or "flexible" in row["metric"]:
                    continue
                n = int(row["n_examples"])
                se = (float(row["ci_high"]) - float(row["ci_low"])) / (2 * Z975)
                out[(cls, row["task"])].append((n * se * se, n, int(row["seeds"]), str(path.parent.relative_to(root))))
    return out


def draw_spreads(root: Path) -> dict[tuple[str, str], list[tuple[float, str]]]:
    """``{(class, task): [(sd over draws of the per-draw difference, condition), ...]}``."""
    per_draw: dict[tuple, dict[int, float]] = defaultdict(dict)
    for path in sorted(root.glob("**/points.csv")):
        study = MERGED.get(path.parent.name, str(path.parent.relative_to(root)))
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
        for row in rows:
            if row["method"] != "mathneuro":
                continue
            twin = [r for r in rows if r["method"] == "random" and not r.get("reference")
                    and all(r[f] == row[f] for f in ("filter", "top_k", "scalar", "seed"))]
            for col, value in row.items():
                if not col.startswith(("math/", "nonmath/")) or col.endswith("_stderr") or "mmlu_" in col \
                        or "flexible" in col or not value:
                    continue
                task = col.split("/")[1]
                side = "math" if col.startswith("math/") else "non-math"
                cond = (study, row["filter"], row["top_k"], row["scalar"], task, side)
                base = row.get(f"baseline/{col}")
                if row["intervention"] == "scale" and base:
                    per_draw[("scale: M - unedited", *cond)][int(row["seed"])] = float(value) - float(base)
                if twin and twin[0].get(col):
                    kind = row["intervention"]
                    per_draw[(f"{kind}: M - random", *cond)][int(row["seed"])] = float(value) - float(twin[0][col])
    out: dict[tuple[str, str], list] = defaultdict(list)
    for (cls, study, filt, top_k, scalar, task, side), draws in per_draw.items():
        if len(draws) < 2:
            continue
        values = list(draws.values())
        mean = sum(values) / len(values)
        sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        out[(f"{cls}, {side}", task)].append((sd, f"{study} {filt} K={top_k} s={scalar} ({len(values)} draws)"))
    return out


def power_row(v: float, s_draw: float, n: int, draws: int = DRAWS) -> dict[str, float]:
    se = math.sqrt(v / n + s_draw ** 2 / draws)
    row = {"se": se, "mdd": (Z975 + Z.inv_cdf(0.80)) * se, "margin80": (Z95 + Z90) * se}
    for margin in MARGINS:
        row[f"power{margin}"] = max(0.0, 2 * Z.cdf(margin / se - Z95) - 1)
    return row


def report(root: Path = ROOT) -> str:
    variances, spreads = example_variances(root), draw_spreads(root)
    lines = ["### Pilot variances (backed out of the committed issue-16 intervals)", "",
             "| comparison | task | per-example variance v (n, draws, study) | draw sd of the difference (condition) |",
             "|---|---|---|---|"]
    chosen: dict[tuple[str, str], tuple[float, float]] = {}
    for cls, task, _ in PLANNED:
        vs = variances.get((cls, task), [])
        sds = spreads.get((cls, task), [])
        v = max((x[0] for x in vs), default=float("nan"))
        sd = max((x[0] for x in sds), default=0.0)
        chosen[(cls, task)] = (v, sd)
        vtxt = "; ".join(f"{x[0]:.3f} ({x[1]}, {x[2]}, {x[3]})" for x in vs) or "none"
        stxt = "; ".join(f"{x[0]:.3f} ({x[1]})" for x in sds) or "none (taken as 0)"
        lines.append(f"| {cls} | {task} | {vtxt} | {stxt} |")
    lines += ["", "The largest of each is used below (conservative).", "",
              f"### Planned sizes, D = {DRAWS} draws", "",
              "| comparison | task | n | v | draw sd | se | detectable difference (80 %, two-sided 0.05) "
              "| equivalence power at +-0.03 | at +-0.05 | margin with 80 % equivalence power |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for cls, task, n in PLANNED:
        v, sd = chosen[(cls, task)]
        if math.isnan(v):
            continue
        p = power_row(v, sd, n)
        lines.append(f"| {cls} | {task} | {n} | {v:.3f} | {sd:.3f} | {p['se']:.4f} | {p['mdd']:.3f} | "
                     f"{p['power0.03']:.2f} | {p['power0.05']:.2f} | {p['margin80']:.3f} |")
    lines += ["", "### The same comparisons at other sizes (MMLU and RACE: M - random, pruning)", "",
              "| task | n | se | detectable difference | equivalence power at +-0.03 | at +-0.05 |", "|---|---|---|---|---|---|"]
    for task in ("mmlu", "race"):
        v, sd = chosen[("prune: M - random, non-math", task)]
        for n in (300, 570, 1140, 2280):
            p = power_row(v, sd, n)
            lines.append(f"| {task} | {n} | {p['se']:.4f} | {p['mdd']:.3f} | {p['power0.03']:.2f} | {p['power0.05']:.2f} |")
    sd_nonmath = max(chosen[("prune: M - random, non-math", t)][1] for t in ("mmlu", "race"))
    lines += ["", f"### Tasks without a pilot (generalisation, MATH): assumed discordance, draw sd {sd_nonmath:.3f}", "",
              "| task | n | " + " | ".join(f"discordance {d:.2f}: detectable / equiv. power +-0.05" for d in ASSUMED_DISCORDANCE)
              + " |", "|---|---|" + "---|" * len(ASSUMED_DISCORDANCE)]
    for task, n in UNPILOTED:
        cells = []
        for d in ASSUMED_DISCORDANCE:
            p = power_row(d, sd_nonmath, n)
            cells.append(f"{p['mdd']:.3f} / {p['power0.05']:.2f}")
        lines.append(f"| {task} | {n} | " + " | ".join(cells) + " |")
    lines += ["", "### Nothing changed: the one-sided 95 % bound on the share of examples changed (rule of three)", "",
              "| n | bound 1 - 0.05^(1/n) | 3 / n |", "|---|---|---|"]
    for n in (40, 100, 300, 570):
        lines.append(f"| {n} | {1 - 0.05 ** (1 / n):.4f} | {3 / n:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT), help="folder of the pilot results (default: %(default)s)")
    args = parser.parse_args(argv)
    sys.stdout.write(report(Path(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
