"""The power note of experiments/ANALYSIS_PLAN.md: what difference each planned size can detect.

    .venv/bin/python experiments/claims/plan_power.py            # markdown tables on stdout
    .venv/bin/python experiments/claims/plan_power.py --amended  # the amendment of 2026-12-06
    # the confirmatory amendment (experiments/claims/confirm_power.py):
    .venv/bin/python experiments/claims/plan_power.py --confirmatory

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

ROOT = Path(__file__).resolve().parents[1] / "results" / "claims_1p5b"
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
              "| task | n | se | detectable difference | equivalence power at +-0.03 | at +-0.05 |",
              "|---|---|---|---|---|---|"]
    for task in ("mmlu", "race"):
        v, sd = chosen[("prune: M - random, non-math", task)]
        for n in (300, 570, 1140, 2280):
            p = power_row(v, sd, n)
            lines.append(f"| {task} | {n} | {p['se']:.4f} | {p['mdd']:.3f} | {p['power0.03']:.2f} | "
                         f"{p['power0.05']:.2f} |")
    sd_nonmath = max(chosen[("prune: M - random, non-math", t)][1] for t in ("mmlu", "race"))
    lines += ["", f"### Tasks without a pilot (generalisation, MATH): assumed discordance, draw sd {sd_nonmath:.3f}",
              "",
              "| task | n | " + " | ".join(f"discordance {d:.2f}: detectable / equiv. power +-0.05"
                                          for d in ASSUMED_DISCORDANCE)
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


# ----------------------------------------------------------- the amendment of 2026-12-06 (issue 40)
#: Pilot facts the amended power note uses besides the backed-out variances: the unedited GSM8K
#: accuracy (0.52), M's GSM8K accuracy at K = 15 % over the pilots' four draws (0.01, 0.05, 0.06, 0.01:
#: sd 0.026) and the amended test 1b threshold (0.20 x unedited).
UNEDITED_GSM8K, M_GSM8K_DRAW_SD, T1B_FACTOR = 0.52, 0.026, 0.20


def power_direction(effect: float, se: float) -> float:
    """Power of the two-sided 95 % interval to exclude 0 on the effect's side."""
    return Z.cdf(abs(effect) / se - Z975)


def power_equivalence(margin: float, se: float) -> float:
    """Power of two one-sided tests (the 90 % interval inside +-margin) when the truth is 0."""
    return max(0.0, 2 * Z.cdf(margin / se - Z95) - 1)


def power_below(p: float, t: float, n: int, draws: int, sd: float = M_GSM8K_DRAW_SD) -> float:
    """Test 1b: power of the 95 % interval's upper end to fall below t when M's accuracy is p. The
    interval is the bootstrap's hulled with Wilson's on n (not n x draws), so its half-width is
    1.96 x the larger of the two standard errors."""
    se_boot = math.sqrt(p * (1 - p) / n + sd ** 2 / draws)
    se_wilson = math.sqrt(max(p, 1e-9) * (1 - p) / n)
    return Z.cdf((t - p - Z975 * max(se_boot, se_wilson)) / se_boot)


def amended(root: Path = ROOT) -> str:
    """The amendment's power note: every test at its amended size and number of draws."""
    variances, spreads = example_variances(root), draw_spreads(root)

    def pilot(cls: str, task: str) -> tuple[float, float]:
        return (max((x[0] for x in variances.get((cls, task), [])), default=float("nan")),
                max((x[0] for x in spreads.get((cls, task), [])), default=0.0))

    def se(v: float, sd: float, n: int, d: int) -> float:
        return math.sqrt(v / n + sd ** 2 / d)

    lines = ["| test | comparison | n | D | v | draw sd | se | power (what the truth is taken to be) |",
             "|---|---|---|---|---|---|---|---|"]
    v, sd = pilot("prune: M - random, math", "gsm8k_cot")
    s = se(v, sd, 200, 3)
    lines.append(f"| 1a | M - random, GSM8K | 200 | 3 | {v:.3f} | {sd:.3f} | {s:.4f} | "
                 f"{power_direction(0.30, s):.2f} (pilot gap -0.30; detectable {(Z975 + Z80) * s:.3f}) |")
    t = T1B_FACTOR * UNEDITED_GSM8K
    cells = ", ".join(f"{power_below(p, t, 200, 3):.2f} at {p:.2f}" for p in (0.02, 0.03, 0.05, 0.07))
    old = ", ".join(f"{power_below(p, 0.10 * UNEDITED_GSM8K, 200, 3):.2f} at {p:.2f}" for p in (0.02, 0.03, 0.05))
    lines.append(f"| 1b | M's GSM8K accuracy below t = {T1B_FACTOR:.2f} x unedited ({t:.3f}) | 200 | 3 | p(1-p) | "
                 f"{M_GSM8K_DRAW_SD:.3f} | — | {cells} (at t = 0.10 x unedited: {old}) |")
    for test, task, n in (("1c", "race", 300), ("1d", "mmlu", 1140)):
        v, sd = pilot("prune: M - random, non-math", task)
        s = se(v, sd, n, 3)
        lines.append(f"| {test} | M - random, {task.upper()}, +-0.05 | {n} | 3 | {v:.3f} | {sd:.3f} | {s:.4f} | "
                     f"{power_equivalence(0.05, s):.2f} (truth 0) |")
    for test, task, n, effect in (("2a", "GSM8K", 100, 0.52), ("2b", "RACE", 150, 0.14), ("2c", "MMLU", 570, 0.24)):
        s = se(0.30, 0.03, n, 2)
        lines.append(f"| {test} | Wanda - unedited, {task} | {n} | 2 | 0.30 (assumed) | 0.030 (assumed) | {s:.4f} | "
                     f"{power_direction(effect, s):.2f} (pilot effect -{effect:.2f}) |")
    v, sd = pilot("scale: M - unedited, math", "gsm8k_cot")
    s = se(v, sd, 300, 2)
    gains = ", ".join(f"{power_direction(g * UNEDITED_GSM8K, s):.2f} at +{g:.0%}" for g in (0.04, 0.105, 0.17))
    contra = Z.cdf((0.04 * UNEDITED_GSM8K) / s - Z975)
    lines.append(f"| 3a | M - unedited, GSM8K (scale) | 300 | 2 | {v:.3f} | {sd:.3f} | {s:.4f} | higher: {gains} "
                 f"(relative); P(contradicted) if the gain is 0: {contra:.2f} |")
    s = se(0.10, sd, 154, 2)
    gains = ", ".join(f"{power_direction(g * 0.30, s):.2f} at +{g:.0%}" for g in (0.05, 0.20, 0.35))
    contra = Z.cdf((0.05 * 0.30) / s - Z975)
    lines.append(f"| 3b | M - unedited, MATH (scale; unedited 0.30 assumed) | 154 | 2 | 0.10 (assumed) | {sd:.3f} | "
                 f"{s:.4f} | higher: {gains}; P(contradicted) if the gain is 0: {contra:.2f} |")
    v, sd = pilot("scale: M - unedited, non-math", "mmlu")
    for test, task, n, sd_ in (("3c", "MMLU", 1140, sd), ("3d", "RACE", 300, 0.014)):
        s = se(v, sd_, n, 2)
        lines.append(f"| {test} | M - unedited, {task} (scale), +-0.03 | {n} | 2 | {v:.3f} | {sd_:.3f} | {s:.4f} | "
                     f"{power_equivalence(0.03, s):.2f} (truth 0) |")
    for test, task, n in (("6a/6d", "MATH", 105), ("6b/6e", "MathQA", 1000), ("6c/6f", "EGSM", 100)):
        s = se(0.30, 0.014, n, 2)
        lines.append(f"| {test} | M - random / M - unedited, {task} | {n} | 2 | 0.30 (assumed) | 0.014 | {s:.4f} | "
                     f"detectable {(Z975 + Z80) * s:.3f} |")
    for test, task, n in (("6g", "HellaSwag", 500), ("6h", "PIQA", 1000), ("6i", "WinoGrande", 1000),
                          ("6j", "MuTual", 500)):
        cells = ", ".join(f"{power_equivalence(0.05, se(d, 0.014, n, 2)):.2f} at discordance {d:.2f}"
                          for d in ASSUMED_DISCORDANCE)
        lines.append(f"| {test} | M - random, {task}, +-0.05 | {n} | 2 | assumed | 0.014 | — | {cells} |")
    lines.append("| 6k | M vs random, WikiText-2 log word-perplexity ratio, +-log 1.10 | 15 articles | 2 | no pilot "
                 "| — | — "
                 "| unknown: no pilot of the per-article variance |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT), help="folder of the pilot results (default: %(default)s)")
    parser.add_argument("--amended", action="store_true", help="the amendment of 2026-12-06: every test at its size")
    parser.add_argument("--confirmatory", action="store_true",
                        help="the confirmatory amendment of 2026-12-07: power from the committed records, CPU-hours")
    args = parser.parse_args(argv)
    if args.confirmatory:
        import importlib.util

        spec = importlib.util.spec_from_file_location("confirm_power",
                                                      Path(__file__).resolve().parent / "confirm_power.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.stdout.write(module.report())
        return 0
    sys.stdout.write(amended(Path(args.root)) if args.amended else report(Path(args.root)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
