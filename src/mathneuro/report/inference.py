"""Inference for paired comparisons: intervals over identification draws and examples, honest
intervals at 0 and 1, equivalence and difference decisions, and Holm's adjustment over a family.

An edited point and its reference (the unedited model, or random weights of the same counts) are
scored on the same n examples under each of D identification draws: ``E[s, i]``, ``R[s, i]``,
``d = E - R``. The statistic is the mean of ``d`` over draws and examples.

- :func:`hierarchical_bootstrap` resamples draws with replacement, then examples with replacement
  (one draw of example indices serves every resampled draw: the draws were evaluated on the same
  examples). With several draws, ``D - 1`` draws are taken per resample, which makes the draw
  component of the bootstrap variance unbiased (the plug-in variance of D values is (D-1)/D of the
  sample variance); with one draw it is today's paired bootstrap, number for number.
- Binary metrics (every value 0 or 1) also get Newcombe's hybrid score interval for a difference of
  paired proportions (Newcombe 1998, Statistics in Medicine 17:2635, method 10) on the draw-averaged
  2x2 table scaled to the effective number of examples (:func:`effective_examples`), and the reported interval is the
  hull of both, so it never collapses to [0, 0] at a ceiling. When no example changed in any draw, the interval is the
  rule of three (the exact bound ``1 - alpha**(1/n)`` on the share of examples changed each way; ``3/n`` at one-sided
  alpha = 0.05).
- p-values are those of the same intervals (a hull's p-value is the larger of its parts'), so a
  decision from a p-value and the matching interval agree: equivalence within +-margin by two
  one-sided tests at alpha (the 90 % interval inside the margins), a difference at two-sided alpha
  (the 95 % interval excludes 0). The verdict every output shows is :func:`row_verdict`: the draws +
  examples interval decides (:data:`VERDICT_RULE`); the examples-only interval decides nothing.
- :func:`holm` adjusts a family's p-values (step-down, strong control of the family-wise error).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from mathneuro.report.draws import draw_correlation, effective_examples  # noqa: F401 (part of this API)
from mathneuro.report.verdict import (  # noqa: F401 (part of this API)
    HIGHER,
    LOWER,
    NO_DIFFERENCE,
    VERDICT_INTERVAL,
    VERDICT_RULE,
    interval_verdict,
    markdown_cells,
    row_verdict,
)

ALPHA = 0.05
DEFAULT_RESAMPLES = 5000
_CHUNK_ENTRIES = 4_000_000  # bootstrap indices held at once (32 MB of int64)
_DRAW_STREAM = 0x44524157  # appended to the seed: the draws' resampling stream ("DRAW")
_NORMAL = NormalDist()
EQUIVALENT, NOT_EQUIVALENT, INCONCLUSIVE = "equivalent", "not equivalent", "inconclusive"
#: Columns the inference adds to ``paired.csv`` (after the existing ones, never renaming them).
INFERENCE_COLUMNS = ("draw_diffs", "ci95_low", "ci95_high", "ci90_low", "ci90_high", "interval", "changed_up",
                     "changed_down", "margin", "p_equivalence", "p_nonequivalence", "equivalence", "p_difference",
                     "difference", "family", "holm_equivalence", "holm_difference")


# ------------------------------------------------------------------------------------ bootstrap
def _seed_list(seed: int | Sequence[int]) -> list[int]:
    return [int(seed)] if isinstance(seed, (int, np.integer)) else [int(s) for s in seed]


def paired_bootstrap(diffs: Any, *, resamples: int = DEFAULT_RESAMPLES, confidence: float = 0.95,
                     seed: int | Sequence[int] = 0) -> tuple[float, float, float]:
    """``(mean, low, high)`` of paired differences with a percentile bootstrap over examples only.

    ``diffs``: per-example differences, shape ``[n]``, or ``[seeds, n]`` for several seeds on the
    same n examples (the statistic is then the mean over seeds of the per-seed means; one draw of
    example indices serves every seed; seeds are not resampled). Deterministic for a given ``seed``."""
    d = _as_draws(diffs, "paired_bootstrap")
    _check(confidence, resamples)
    stats = hierarchical_bootstrap(d.mean(axis=0, keepdims=True), resamples=resamples, seed=seed)
    low, high = percentile_interval(stats, confidence)
    return float(d.mean(axis=0).mean()), low, high


def _as_draws(values: Any, who: str) -> np.ndarray:
    d = np.asarray(values, dtype=np.float64)
    if d.ndim == 1:
        d = d[None, :]
    if d.ndim != 2 or d.shape[1] == 0 or d.shape[0] == 0:
        raise ValueError(f"{who}: need [n] or [seeds, n] differences with n > 0, got shape {d.shape}")
    return d


def _check(confidence: float, resamples: int) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence: must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples: must be >= 1, got {resamples}")


def hierarchical_bootstrap(values: Any, *, resamples: int = DEFAULT_RESAMPLES, seed: int | Sequence[int] = 0,
                           draws_per_resample: int | None = None, denominators: Any = None) -> np.ndarray:
    """The bootstrap distribution (``[resamples]``) of the mean of ``values`` (``[draws, n]``).

    Each resample takes ``draws_per_resample`` draws with replacement (default ``D - 1``, at least 1)
    and n examples with replacement, the same examples for every draw taken. With ``denominators``
    (same shape) the statistic is the ratio of the sums, e.g. log-likelihood per word. Vectorised in
    chunks; deterministic for a given ``seed``; one draw gives :func:`paired_bootstrap`'s numbers."""
    d = _as_draws(values, "hierarchical_bootstrap")
    den = None if denominators is None else np.broadcast_to(np.asarray(denominators, dtype=np.float64), d.shape)
    n_draws, n = d.shape
    take = draws_per_resample or max(1, n_draws - 1)
    rng = np.random.default_rng(_seed_list(seed))
    draw_rng = np.random.default_rng([*_seed_list(seed), _DRAW_STREAM])
    stats = np.empty(resamples, dtype=np.float64)
    chunk = max(1, _CHUNK_ENTRIES // n)
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        if n_draws == 1 and den is None:
            stats[start:stop] = d[0][idx].mean(axis=1)
            continue
        picks = draw_rng.integers(0, n_draws, size=(stop - start, take))
        rows = np.stack([d[s][idx].sum(axis=1) for s in range(n_draws)], axis=1)  # [chunk, draws]
        num = np.take_along_axis(rows, picks, axis=1).sum(axis=1)
        if den is None:
            stats[start:stop] = num / (take * n)
        else:
            drows = np.stack([den[s][idx].sum(axis=1) for s in range(n_draws)], axis=1)
            stats[start:stop] = num / np.take_along_axis(drows, picks, axis=1).sum(axis=1)
    return stats


def percentile_interval(stats: np.ndarray, confidence: float) -> tuple[float, float]:
    alpha = (1 - confidence) / 2
    low, high = np.quantile(stats, [alpha, 1 - alpha])
    return float(low), float(high)


def paired_arrays(edited: Sequence[Mapping[Any, float]], reference: Sequence[Mapping[Any, float]]
                  ) -> tuple[np.ndarray, np.ndarray, list]:
    """``(E, R, keys)``: ``[draws, n]`` values of per-draw ``{example: value}`` records on the examples
    common to every draw and both sides (sorted)."""
    if len(edited) != len(reference) or not edited:
        raise ValueError("paired_differences: need one edited and one reference record per seed")
    common: set | None = None
    for a, b in zip(edited, reference, strict=True):
        both = set(a) & set(b)
        common = both if common is None else common & both
    keys = sorted(common or (), key=lambda k: (str(type(k)), k))
    shape = (len(edited), len(keys))
    mine = np.array([[a[k] for k in keys] for a in edited], dtype=np.float64).reshape(shape)
    theirs = np.array([[b[k] for k in keys] for b in reference], dtype=np.float64).reshape(shape)
    return mine, theirs, keys


# ----------------------------------------------------------------------- Wilson, Newcombe, rule of 3
def wilson_interval(successes: Any, n: Any, z: Any) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval for a proportion (vectorised; counts may be fractional)."""
    x, n, z = (np.asarray(v, dtype=np.float64) for v in (successes, n, z))
    p = x / n
    centre = p + z * z / (2 * n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    denom = 1 + z * z / n
    return np.clip((centre - half) / denom, 0, 1), np.clip((centre + half) / denom, 0, 1)


def newcombe_paired(e: float, f: float, g: float, h: float, z: Any) -> tuple[np.ndarray, np.ndarray]:
    """Newcombe's hybrid score interval (1998, method 10) for ``(f - g) / n`` of a paired 2x2 table:
    ``e`` both 1, ``f`` first 1 and second 0, ``g`` first 0 and second 1, ``h`` both 0; ``z`` the
    normal quantile (a scalar or an array, for several levels at once)."""
    n = e + f + g + h
    if n <= 0:
        raise ValueError("newcombe_paired: the table is empty")
    theta = (f - g) / n
    p1, p2 = (e + f) / n, (e + g) / n
    l1, u1 = wilson_interval(e + f, n, z)
    l2, u2 = wilson_interval(e + g, n, z)
    den = (e + f) * (g + h) * (e + g) * (f + h)
    num = e * h - f * g
    if den <= 0:
        phi = 0.0
    else:
        phi = (max(num - n / 2, 0.0) if num > 0 else num) / math.sqrt(den)
    delta = np.sqrt(np.maximum((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0))
    eps = np.sqrt(np.maximum((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0))
    return np.maximum(theta - delta, -1.0), np.minimum(theta + eps, 1.0)


def newcombe_pvalue(table: Sequence[float], x: float, *, greater: bool) -> float:
    """One-sided p-value of Newcombe's interval for ``theta > x`` (``greater``) or ``theta < x``: the
    level at which the interval's bound reaches x (found by bisection on z, vectorised over nothing)."""
    e, f, g, h = (float(v) for v in table)
    n = e + f + g + h
    theta = (f - g) / n
    if (greater and x >= theta) or (not greater and x <= theta):
        return 1.0
    den = (e + f) * (g + h) * (e + g) * (f + h)
    num = e * h - f * g
    phi = 0.0 if den <= 0 else (max(num - n / 2, 0.0) if num > 0 else num) / math.sqrt(den)
    p1, p2 = (e + f) / n, (e + g) / n

    def wilson(p: float, z: float) -> tuple[float, float]:  # the scalar twin of wilson_interval
        centre, half = p + z * z / (2 * n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return max(0.0, (centre - half) / (1 + z * z / n)), min(1.0, (centre + half) / (1 + z * z / n))

    lo, hi = 0.0, 40.0
    for _ in range(60):
        mid = (lo + hi) / 2
        (l1, u1), (l2, u2) = wilson(p1, mid), wilson(p2, mid)
        if greater:
            inside = theta - math.sqrt(max((p1 - l1) ** 2 - 2 * phi * (p1 - l1) * (u2 - p2) + (u2 - p2) ** 2, 0)) > x
        else:
            inside = theta + math.sqrt(max((u1 - p1) ** 2 - 2 * phi * (u1 - p1) * (p2 - l2) + (p2 - l2) ** 2, 0)) < x
        lo, hi = (mid, hi) if inside else (lo, mid)
    return float(1 - _NORMAL.cdf(lo))


def rule_of_three(n: int, alpha: float) -> float:
    """The exact one-sided ``1 - alpha`` upper bound on a rate after 0 events in n trials
    (``1 - alpha**(1/n)``, about ``3/n`` at alpha = 0.05)."""
    return 1 - alpha ** (1 / n)


# ----------------------------------------------------------------------------------- comparison
@dataclass
class Tests:
    """One-sided p-value functions of one comparison: ``greater(x)`` for theta > x, ``less(x)`` for theta < x."""

    estimate: float
    stats: np.ndarray
    table: tuple[float, float, float, float] | None  # draw-averaged paired 2x2 table (binary metrics)
    unchanged_n: int | None  # n when no example changed in any draw (rule of three)

    def greater(self, x: float) -> float:
        p = float(np.mean(self.stats <= x))
        if self.unchanged_n is not None:
            return max(p, (1 + x) ** self.unchanged_n if x < 0 else 1.0)
        if self.table is not None:
            p = max(p, newcombe_pvalue(self.table, x, greater=True))
        return p

    def less(self, x: float) -> float:
        p = float(np.mean(self.stats >= x))
        if self.unchanged_n is not None:
            return max(p, (1 - x) ** self.unchanged_n if x > 0 else 1.0)
        if self.table is not None:
            p = max(p, newcombe_pvalue(self.table, x, greater=False))
        return p

    def interval(self, confidence: float) -> tuple[float, float, str]:
        low, high = percentile_interval(self.stats, confidence)
        alpha = (1 - confidence) / 2
        if self.unchanged_n is not None:
            bound = rule_of_three(self.unchanged_n, alpha)
            return min(low, -bound), max(high, bound), "rule of three"
        if self.table is not None:
            nl, nh = newcombe_paired(*self.table, _NORMAL.inv_cdf(1 - alpha))
            return min(low, float(nl)), max(high, float(nh)), "bootstrap+newcombe"
        return low, high, "bootstrap"

    def equivalence(self, margin: float) -> tuple[float, float]:
        """``(p_equivalence, p_nonequivalence)``: two one-sided tests against +-margin, and the
        smaller one-sided p that theta lies beyond a margin."""
        return (max(self.greater(-margin), self.less(margin)), min(self.greater(margin), self.less(-margin)))

    def difference(self) -> float:
        """Two-sided p-value for theta != 0."""
        return min(1.0, 2 * min(self.greater(0.0), self.less(0.0)))


def is_binary(*arrays: np.ndarray) -> bool:
    return all(bool(np.all((a == 0) | (a == 1))) for a in arrays)


def paired_tests(edited: Any, reference: Any, *, resamples: int = DEFAULT_RESAMPLES,
                 seed: int | Sequence[int] = 0, draws_per_resample: int | None = None,
                 denominators: Any = None) -> Tests:
    """The tests of ``edited - reference`` (``[draws, n]`` each, examples aligned)."""
    e, r = _as_draws(edited, "paired_tests"), _as_draws(reference, "paired_tests")
    if e.shape != r.shape:
        raise ValueError(f"paired_tests: edited {e.shape} and reference {r.shape} differ in shape")
    d = e - r
    stats = hierarchical_bootstrap(d, resamples=resamples, seed=seed, draws_per_resample=draws_per_resample,
                                   denominators=denominators)
    estimate = float(d.sum() / np.broadcast_to(denominators, d.shape).sum()) if denominators is not None \
        else float(d.mean())
    table, unchanged = None, None
    bounded = denominators is None and bool(np.all((e >= 0) & (e <= 1) & (r >= 0) & (r <= 1)))
    if bounded and not np.any(d):
        unchanged = e.shape[1]
    elif denominators is None and is_binary(e, r):
        scale = effective_examples(d) / (e.shape[0] * e.shape[1])  # the draw-averaged table, on the effective n
        table = (float(np.sum(e * r)) * scale, float(np.sum(e * (1 - r))) * scale,
                 float(np.sum((1 - e) * r)) * scale, float(np.sum((1 - e) * (1 - r))) * scale)
    return Tests(estimate, stats, table, unchanged)


def equivalence_verdict(p_equivalence: float, p_nonequivalence: float, alpha: float = ALPHA) -> str:
    if p_equivalence <= alpha:
        return EQUIVALENT
    return NOT_EQUIVALENT if p_nonequivalence <= alpha else INCONCLUSIVE


def difference_verdict(p_difference: float, estimate: float, alpha: float = ALPHA) -> str:
    """The verdict of a p-value (Holm's adjusted ones: a family's decisions)."""
    if p_difference > alpha:
        return NO_DIFFERENCE
    return HIGHER if estimate > 0 else LOWER


def inference_columns(edited: Any, reference: Any, *, margin: float | None = None, confidence: float = 0.95,
                      resamples: int = DEFAULT_RESAMPLES, seed: int | Sequence[int] = 0,
                      alpha: float = ALPHA) -> dict[str, Any]:
    """The :data:`INFERENCE_COLUMNS` of one ``paired.csv`` row (Holm's columns empty until
    :func:`apply_holm`). ``confidence`` sets the reported interval; the equivalence interval is
    always ``1 - 2 alpha`` (90 % at alpha = 0.05)."""
    e, r = _as_draws(edited, "inference_columns"), _as_draws(reference, "inference_columns")
    tests = paired_tests(e, r, resamples=resamples, seed=seed)
    low, high, how = tests.interval(confidence)
    low90, high90, _ = tests.interval(1 - 2 * alpha)
    p_diff = tests.difference()
    row: dict[str, Any] = {
        "draw_diffs": ";".join(f"{v:.4g}" for v in (e - r).mean(axis=1)), "ci95_low": low, "ci95_high": high,
        "ci90_low": low90, "ci90_high": high90, "interval": how,
        "changed_up": int(np.sum((e - r) > 0)), "changed_down": int(np.sum((e - r) < 0)),
        "margin": margin, "p_equivalence": None, "p_nonequivalence": None, "equivalence": None,
        "p_difference": p_diff, "difference": interval_verdict(low, high),
        "family": None, "holm_equivalence": None, "holm_difference": None,
    }
    if margin is not None:
        p_eq, p_ne = tests.equivalence(margin)
        row.update(p_equivalence=p_eq, p_nonequivalence=p_ne, equivalence=equivalence_verdict(p_eq, p_ne, alpha))
    return row


# -------------------------------------------------------------------------------------- families
def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values (same order as given; capped at 1)."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted


_FAMILY = re.compile(r"^(?P<name>[\w.\-]+)(?::(?P<where>.+))?$")
_CLAUSE = re.compile(r"^(?P<key>[\w./\-]+)=(?P<values>[^,=]+)$")


@dataclass(frozen=True)
class Family:
    """A named set of rows: those whose every ``key`` has one of its ``values`` (all rows without keys)."""

    name: str
    where: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def matches(self, row: Mapping[str, Any]) -> bool:
        return all(any(_same(row.get(key), v) for v in values) for key, values in self.where)


def _same(cell: Any, value: str) -> bool:
    if isinstance(cell, (int, float)) and not isinstance(cell, bool):
        try:
            return math.isclose(float(cell), float(value), rel_tol=1e-9, abs_tol=1e-12)
        except ValueError:
            return False
    return str(cell) == value


def parse_family(spec: str) -> Family:
    """``NAME`` (every row) or ``NAME:key=value[|value...][,key=value...]``, e.g.
    ``as_random:reference=random,side=nonmath,task=race|mmlu``. Raises ValueError naming the problem."""
    m = _FAMILY.match(spec.strip())
    if m is None:
        raise ValueError(f"family {spec!r}: expected NAME or NAME:key=value[|value][,key=value...]")
    where = []
    for clause in filter(None, (m.group("where") or "").split(",")):
        c = _CLAUSE.match(clause.strip())
        if c is None:
            raise ValueError(f"family {spec!r}: clause {clause!r} is not key=value[|value...]")
        where.append((c.group("key"), tuple(v.strip() for v in c.group("values").split("|"))))
    return Family(m.group("name"), tuple(where))


def apply_holm(rows: list[dict], families: Iterable[str | Family], *, alpha: float = ALPHA) -> list[dict]:
    """Set ``family``, ``holm_equivalence`` and ``holm_difference`` of ``rows`` (in place): each row
    belongs to the first family that matches it; within a family the equivalence p-values (where a
    margin was set) and the difference p-values are Holm-adjusted separately."""
    fams = [f if isinstance(f, Family) else parse_family(f) for f in families]
    members: dict[str, list[dict]] = {}
    for row in rows:
        fam = next((f for f in fams if f.matches(row)), None)
        row["family"], row["holm_difference"], row["holm_equivalence"] = (fam.name if fam else None), None, None
        if fam is not None:
            members.setdefault(fam.name, []).append(row)
    for group in members.values():
        diff_adj = holm([r["p_difference"] for r in group])
        for row, p in zip(group, diff_adj, strict=True):
            row["holm_difference"] = difference_verdict(float(p), float(row["diff"]), alpha)
        tested = [r for r in group if r.get("p_equivalence") is not None]
        eq_adj, ne_adj = holm([r["p_equivalence"] for r in tested]), holm([r["p_nonequivalence"] for r in tested])
        for row, pe, pn in zip(tested, eq_adj, ne_adj, strict=True):
            row["holm_equivalence"] = equivalence_verdict(float(pe), float(pn), alpha)
    return rows
