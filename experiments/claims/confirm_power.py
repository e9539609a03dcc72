"""The confirmatory amendment's power and CPU-hours (``plan_power.py --confirmatory``).

Every variance comes from the committed records of the amended plan (``experiments/records/``), not from the
issue-16 pilots: for a comparison, ``d[s, i]`` (edited minus reference, draw s, example i) is split by a
two-way analysis of variance without replication into an example component (shared by the draws), a draw
component and a residual, so that the standard error of the mean over D draws and n examples is

    se(n, D) = sqrt(var_example / n + var_draw / D + var_residual / n * (1 / (D - 1) + 1 / D)),

the second residual term because the bootstrap (§4) resamples D - 1 of the D draws and the examples, so a
draw's example noise enters twice (the plan's known conservative side).

At the committed sizes that model is checked against the hierarchical bootstrap (§4) of the committed
differences; where the bootstrap's se is larger, the model's se is scaled up by the ratio (never down).
Power then follows the plan's decision rules: direction (95 % interval excludes 0), equivalence (the 90 %
interval inside +-margin), threshold (the 95 % interval's upper end below t). The truth is taken at the
committed estimate (and, for equivalence, also at 0).

CPU-hours come from per-example times measured on the Intel Xeon with AMX at one thread in the amended
plan's sittings (``studies/claims_amended.md``; see ``COSTS``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path
from statistics import NormalDist
from typing import NamedTuple

import numpy as np
from claimslib.records import read_study

from mathneuro.report.inference import hierarchical_bootstrap


def _sibling(name: str):
    """Another script of experiments/, ``"<folder>/<script>"``, as a module (the folders are not packages)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / f"{name}.py"
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SIZES = _sibling("data/confirm_examples").SIZES  # the fresh examples' sizes: one source for the lists and the power
RECORDS = Path(__file__).resolve().parents[1] / "records"
Z = NormalDist()
Z975, Z95 = Z.inv_cdf(0.975), Z.inv_cdf(0.95)

#: The amendment's sizes (examples per task; MMLU and MATH: per subject x subjects) and draws.
SEEDS = (100, 101, 102, 103)  # claims 1, 4, 5: identification draws never run before (earlier plans: 0-4)
SEEDS_6D = (100, 101)  # test 6d: M of claim 1's first two fresh draws
N_GSM8K, N_RACE, N_MMLU_PER_SUBJECT, N_MATH_PER_SUBJECT = (SIZES[k] for k in ("gsm8k", "race", "mmlu", "math"))
N_MMLU, N_MATH = 57 * N_MMLU_PER_SUBJECT, 7 * N_MATH_PER_SUBJECT
N_GSM8K_M = N_GSM8K_RANDOM = N_GSM8K
T1B_FACTORS = (0.20, 0.10)  # 0.20 decides (the plan as it stands); 0.10 (the plan of 2026-12-05) is reported

#: CPU-seconds per example at one thread on the Intel Xeon with AMX (bf16), from the amended plan's records:
#: RACE 300 + MMLU 1,140 took 1,399-1,454 s (claim 3's resumed points), split by the pilot's ratio of RACE to
#: MMLU (8 : 1 per example); GSM8K 300 + MATH 154 undrafted took about 75 min (claim 3), split by the pilot's
#: ratio (10 : 11.5); a pruned point's drafted GSM8K 200 took 445-665 s beyond its RACE and MMLU (claim 1's
#: Xeon points: evaluation 1,895-2,115 s); a pruned point's drafted MATH took 19-30 s a problem (claim 6's
#: points, 3,633-4,830 s, less their other tasks); an identification 58-253 s (N = 100).
COSTS = {"gsm8k_undrafted": 9.4, "gsm8k_drafted_pruned": 3.5, "race": 3.3, "mmlu": 0.41,
         "math_undrafted": 10.8, "math_drafted_pruned": 25.0, "ident_100": 250.0, "ident_small": 60.0}
#: The factor the amendment assumed for the AMD EPYC with AVX2 only (no bf16 units) it was written on: bf16 against
#: float32 on that EPYC. Against the Xeon's bf16 it is about 50 (measured since: studies/claims_confirm.md); kept,
#: since the committed amendment prints this table.
EPYC_AVX2_FACTOR = 6.0


class Components(NamedTuple):
    """Variance components of a paired difference and the committed sizes they were estimated at."""

    mean: float
    example: float
    draw: float
    residual: float
    n: int
    draws: int
    boot_se: float

    def se(self, n: int, draws: int) -> float:
        """Standard error at n examples and D draws, scaled up to the bootstrap's at the committed sizes."""
        return self.model_se(n, draws) * max(1.0, self.boot_se / self.model_se(self.n, self.draws))

    def model_se(self, n: int, draws: int) -> float:
        """The bootstrap's se at (n, D) by components: it resamples D - 1 of the D draws, so the residual
        enters through the examples (1 / (D - 1)) and through the draw means (1 / D)."""
        return math.sqrt(self.example / n + self.draw / draws
                         + self.residual / n * (1 / max(draws - 1, 1) + 1 / draws))


def components(d: np.ndarray, seed: int = 0) -> Components:
    """Two-way ANOVA (draws x examples, one value a cell) of ``d`` and its bootstrap se (2,000 resamples)."""
    n_draws, n = d.shape
    grand = d.mean()
    by_draw, by_example = d.mean(axis=1), d.mean(axis=0)
    ms_draw = n * ((by_draw - grand) ** 2).sum() / max(n_draws - 1, 1)
    ms_example = n_draws * ((by_example - grand) ** 2).sum() / (n - 1)
    resid = d - by_draw[:, None] - by_example[None, :] + grand
    ms_res = (resid ** 2).sum() / max((n_draws - 1) * (n - 1), 1)
    boot = hierarchical_bootstrap(d, resamples=2000, seed=seed)
    return Components(float(grand), max(0.0, (ms_example - ms_res) / n_draws), max(0.0, (ms_draw - ms_res) / n),
                      float(ms_res), n, n_draws, float(boot.std(ddof=1)))


@lru_cache(maxsize=8)
def _study(records: Path, study: str) -> list:
    """A study's committed records, read once (several tests read the same study)."""
    return read_study(records / study)


def _order(key) -> tuple:
    """Example keys in file order: doc ids numerically, ``(subtask, doc_id)`` by subtask then id."""
    return (key[0], key[1]) if isinstance(key, tuple) else ("", key)


def _examples(packed, task: str, metric: str) -> dict:
    return {k: float(v[metric]) for k, v in packed.examples.get(task, {}).items() if metric in v}


def paired(records: Path, study: str, edited: str, reference: str, task: str, metric: str,
           seeds: tuple[int, ...]) -> np.ndarray:
    """``[draws, n]`` differences of a study's committed points (reference ``baseline``: its baseline file)."""
    packs = _study(records, study)
    base = {p.name: p for p in packs if p.kind == "baseline"}
    rows_e, rows_r = [], []
    for seed in seeds:
        point = next(p for p in packs if p.kind == "point" and p.name.startswith(f"{edited}__")
                     and p.name.endswith(f"__seed{seed}"))
        e = _examples(point, task, metric)
        if reference == "baseline":
            r = _examples(base[str(point.header.get("baseline"))], task, metric)
        else:
            ref = next(p for p in packs if p.kind == "point" and p.name == point.name.replace(edited, reference, 1))
            r = _examples(ref, task, metric)
        rows_e.append(e)
        rows_r.append(r)
    keys = sorted(set.intersection(*(set(x) for x in rows_e + rows_r)), key=_order)
    return np.array([[e[k] - r[k] for k in keys] for e, r in zip(rows_e, rows_r, strict=True)])


def power_direction(effect: float, se: float) -> float:
    """The two-sided 95 % interval excludes 0 on the effect's side."""
    return Z.cdf(abs(effect) / se - Z975)


def power_equivalence(margin: float, se: float, truth: float = 0.0) -> float:
    """The 90 % interval lies inside (-margin, +margin)."""
    return max(0.0, Z.cdf((margin - truth) / se - Z95) + Z.cdf((margin + truth) / se - Z95) - 1)


def power_below(truth: float, t: float, se: float, se_t: float = 0.0) -> float:
    """The 95 % interval's upper end (truth + 1.96 se) falls below t, t itself estimated with se ``se_t``."""
    return Z.cdf((t - truth - Z975 * se) / math.hypot(se, se_t))


def accuracy(records: Path, study: str, method: str, task: str, metric: str, seeds: tuple[int, ...]) -> np.ndarray:
    """``[draws, n]`` of one method's own scores (its examples common to every draw)."""
    packs = _study(records, study)
    rows = [_examples(next(p for p in packs if p.kind == "point" and p.name.startswith(f"{method}__")
                           and p.name.endswith(f"__seed{s}")), task, metric) for s in seeds]
    keys = sorted(set.intersection(*(set(r) for r in rows)), key=_order)
    return np.array([[r[k] for k in keys] for r in rows])


def baseline_accuracy(records: Path, study: str, task: str, metric: str, n: int) -> float:
    """The unedited model's mean on the first n examples of the study's newest baseline holding the task."""
    packs = [p for p in _study(records, study) if p.kind == "baseline" and task in p.examples]
    values = [float(v[metric]) for k, v in sorted(packs[-1].examples[task].items(),
                                                  key=lambda kv: _order(kv[0])) if metric in v]
    return float(np.mean(values[:n]))


GSM, STRICT = "gsm8k_cot", "exact_match,strict-match"
D1 = len(SEEDS)


def tests(records: Path = RECORDS) -> list[dict]:
    """Every test of the amendment: its sizes, the truth it is powered at and its power (rounded)."""
    rows = []
    c = components(paired(records, "prune", "mathneuro", "random", GSM, STRICT, (0, 1, 2)))
    s = c.se(N_GSM8K_RANDOM, D1)
    rows.append(dict(test="1a", what="M - random, GSM8K (direction)", n=N_GSM8K_RANDOM, D=D1, se=s,
                     power=power_direction(c.mean, s), truth=f"{c.mean:+.3f} (committed)"))
    m = accuracy(records, "prune", "mathneuro", GSM, STRICT, (0, 1, 2))
    u = baseline_accuracy(records, "prune", GSM, STRICT, 200)
    p, sd = float(m.mean()), float(m.mean(axis=1).std(ddof=1))
    for factor in T1B_FACTORS:
        t = factor * u
        se_boot = math.sqrt(p * (1 - p) / N_GSM8K_M + sd ** 2 / D1)
        se_hull = max(se_boot, math.sqrt(p * (1 - p) / N_GSM8K_M))  # Wilson's on n, hulled
        se_t = factor * math.sqrt(u * (1 - u) / N_GSM8K_M)
        rows.append(dict(test=f"1b @ {factor:.2f}", what=f"M's GSM8K below {factor:.2f} x unedited (t = {t:.3f})",
                         n=N_GSM8K_M, D=D1, se=se_hull, power=power_below(p, t, se_hull, se_t),
                         truth=f"M {p:.3f}, draw sd {sd:.3f}, unedited {u:.3f} (committed)"))
    for test, task, label, n in (("1c", "race", "RACE", N_RACE), ("1d", "mmlu", "MMLU", N_MMLU)):
        c = components(paired(records, "prune", "mathneuro", "random", task, "acc", (0, 1, 2)))
        s = c.se(n, D1)
        rows.append(dict(test=test, what=f"M - random, {label}, equivalence +-0.05", n=n, D=D1, se=s,
                         power=power_equivalence(0.05, s, c.mean),
                         truth=f"{c.mean:+.3f} (committed); {power_equivalence(0.05, s):.2f} at 0"))
    c = components(paired(records, "generalisation", "mathneuro", "baseline", "minerva_math", "math_verify", (0, 1)))
    pts = [p for p in _study(records, "generalisation") if p.kind == "baseline"]
    keys = set(map(str, paired_keys(records)))
    u = float(np.mean([float(v["math_verify"]) for k, v in pts[-1].examples["minerva_math"].items()
                       if str(k) in keys]))
    t = -0.5 * u
    s = c.se(N_MATH, len(SEEDS_6D))
    se_t = 0.5 * math.sqrt(u * (1 - u) / N_MATH)
    half = (c.mean + t) / 2
    rows.append(dict(test="6d", what=f"M - unedited, MATH, below -0.5 x unedited (t = {t:.3f})", n=N_MATH,
                     D=len(SEEDS_6D), se=s, power=power_below(c.mean, t, s, se_t),
                     truth=f"{c.mean:+.3f} (committed); {power_below(half, t, s, se_t):.2f} at {half:+.3f}"))
    return rows


def paired_keys(records: Path) -> list:
    """The MATH examples test 6d was judged on in the amended plan (claim 6's points, draws 0-1)."""
    packs = _study(records, "generalisation")
    sets_ = [set(p.examples.get("minerva_math", {})) for p in packs
             if p.kind == "point" and p.name.startswith("mathneuro__")]
    return sorted(set.intersection(*sets_), key=_order)


def stages() -> list[dict]:
    """The amendment's stages in priority order, with their CPU-hours on the Xeon with AMX at one thread."""
    c = COSTS
    nonmath = N_RACE * c["race"] + N_MMLU * c["mmlu"]
    d = len(SEEDS)
    return [
        dict(stage="base1", what=f"unedited, undrafted: GSM8K {N_GSM8K}, RACE {N_RACE}, MMLU {N_MMLU}",
             seconds=N_GSM8K * c["gsm8k_undrafted"] + nonmath),
        dict(stage="claim1", what=f"M and random, K = 15 %, MMLU filter, draws {SEEDS[0]}-{SEEDS[-1]}: GSM8K "
             f"{N_GSM8K} (drafted), RACE {N_RACE}, MMLU {N_MMLU}",
             seconds=2 * d * (N_GSM8K * c["gsm8k_drafted_pruned"] + nonmath + c["ident_100"])),
        dict(stage="claim45", what=f"identification only: MMLU filter N = 1, 10, 100 and RACE filter N = 100, draws "
             f"{SEEDS[0]}-{SEEDS[-1]}", seconds=d * (2 * c["ident_100"] + 2 * c["ident_small"])),
        dict(stage="base6d", what=f"unedited, undrafted: MATH {N_MATH_PER_SUBJECT} per subject ({N_MATH})",
             seconds=N_MATH * c["math_undrafted"]),
        dict(stage="claim6d", what=f"M (claim 1's draws {SEEDS_6D[0]}-{SEEDS_6D[-1]}): MATH {N_MATH} (drafted)",
             seconds=len(SEEDS_6D) * (N_MATH * c["math_drafted_pruned"] + c["ident_100"])),
    ]


def report(records: Path = RECORDS) -> str:
    """The markdown the amendment quotes: every test's sizes and power, then every stage's CPU-hours."""
    lines = ["| test | comparison | n | D | se | power | the truth it is powered at |", "|---|---|---|---|---|---|---|"]
    for r in tests(records):
        lines.append(f"| {r['test']} | {r['what']} | {r['n']} | {r['D']} | {r['se']:.4f} | {r['power']:.2f} | "
                     f"{r['truth']} |")
    lines += ["", "| stage | content | CPU-hours (Xeon with AMX, one thread) |", "|---|---|---|"]
    total = 0.0
    for st in stages():
        total += st["seconds"]
        lines.append(f"| {st['stage']} | {st['what']} | {st['seconds'] / 3600:.2f} |")
    lines.append(f"| total | | **{total / 3600:.1f}** (about {total * EPYC_AVX2_FACTOR / 3600:.0f} on an AMD EPYC "
                 "with AVX2 only) |")
    return "\n".join(lines) + "\n"
