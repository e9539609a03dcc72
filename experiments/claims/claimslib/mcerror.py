"""The Monte Carlo error of bootstrap endpoints and p-values: how far they move with the bootstrap's seed.

A bootstrap of B resamples estimates a p-value as a count over B (``c / B``: the share of resamples beyond a
bound) and an interval's end as a quantile of the B statistics. Both carry Monte Carlo error, which a seed
change shows: with two draws each resample takes one draw, so the statistics sit on a lattice of 1/n steps
and an end can move by a whole step.

- A p-value's bootstrap part ``c / B`` gets Wilson's 95 % interval for a binomial proportion (c of B
  independent resamples). Its deterministic part (Newcombe's or the rule of three's p-value, which the
  reported p is the larger of) has no Monte Carlo error, so the p-value's range is the larger of each end
  and that part (:class:`McEnd`).
- An interval's bootstrap end, the q-quantile of B statistics, gets the order-statistic interval: the
  j-th and k-th smallest statistics, ``j, k = B q -/+ 1.96 sqrt(B q (1 - q))``, which hold the true
  (infinite-B) quantile with probability about 95 % (binomial count of resamples below it). A hulled end
  (Newcombe, rule of three) moves only where the bootstrap's end decides it (:func:`end_error`).

A decision whose p-value's range straddles alpha reads "at the margin": another seed could decide it
otherwise. Every rule p-value of :mod:`claimslib.claims` is a monotone function (max, min, x2) of
``greater`` / ``less`` values, so the rule computed on the low ends and on the high ends bounds it.
"""

from __future__ import annotations

import dataclasses
import math
from statistics import NormalDist

import numpy as np

from mathneuro.report import inference as inf

Z = NormalDist().inv_cdf(0.975)  # the Monte Carlo intervals are 95 %
_FAR = 1e300  # a statistic beyond every bound (finite: np.quantile of inf gives nan)


def count_interval(count: int, resamples: int, z: float = Z) -> tuple[float, float]:
    """Wilson's interval of a bootstrap share ``count / resamples`` (never empty at 0 or B)."""
    lo, hi = inf.wilson_interval(count, resamples, z)
    return float(lo), float(hi)


@dataclasses.dataclass
class McEnd:
    """A view of :class:`~mathneuro.report.inference.Tests` whose bootstrap p-values sit at the low (``end``
    0) or high (1) end of their Monte Carlo interval; the deterministic parts are kept. Duck-types
    ``Tests`` for the rules (``greater``, ``less``, ``equivalence``, ``difference``, ``estimate``)."""

    tests: inf.Tests
    end: int

    @property
    def estimate(self) -> float:
        return self.tests.estimate

    def _fixed(self, x: float, greater: bool) -> float:
        """The deterministic part alone: the bootstrap share made 0 by a statistic that never counts."""
        view = dataclasses.replace(self.tests, stats=np.array([_FAR if greater else -_FAR]))
        return view.greater(x) if greater else view.less(x)

    def greater(self, x: float) -> float:
        stats = self.tests.stats
        ends = count_interval(int(np.count_nonzero(stats <= x)), stats.size)
        return max(ends[self.end], self._fixed(x, True))

    def less(self, x: float) -> float:
        stats = self.tests.stats
        ends = count_interval(int(np.count_nonzero(stats >= x)), stats.size)
        return max(ends[self.end], self._fixed(x, False))

    def equivalence(self, margin: float) -> tuple[float, float]:
        return inf.Tests.equivalence(self, margin)  # type: ignore[arg-type]  # the same formula on these ends

    def difference(self) -> float:
        return inf.Tests.difference(self)  # type: ignore[arg-type]


def quantile_range(stats: np.ndarray, q: float, z: float = Z) -> tuple[float, float]:
    """The order-statistic 95 % interval of the q-quantile of ``stats`` (see the module docstring)."""
    ordered = np.sort(np.asarray(stats, dtype=np.float64))
    b = ordered.size
    half = z * math.sqrt(b * q * (1 - q))
    j = min(b - 1, max(0, math.floor(b * q - half) - 1))
    k = min(b - 1, max(0, math.ceil(b * q + half) - 1))
    return float(ordered[j]), float(ordered[k])


def end_error(tests: inf.Tests, confidence: float) -> tuple[float, float]:
    """``(low, high)`` half-widths of the Monte Carlo intervals of ``tests.interval(confidence)``'s ends."""
    alpha = (1 - confidence) / 2
    lo_range = quantile_range(tests.stats, alpha)
    hi_range = quantile_range(tests.stats, 1 - alpha)
    # the hull's other part: Newcombe's or the rule of three's end (inf where the bootstrap stands alone)
    fixed_lo = dataclasses.replace(tests, stats=np.array([_FAR])).interval(confidence)[0]
    fixed_hi = dataclasses.replace(tests, stats=np.array([-_FAR])).interval(confidence)[1]
    low = [min(v, fixed_lo) for v in lo_range]
    high = [max(v, fixed_hi) for v in hi_range]
    return (low[1] - low[0]) / 2, (high[1] - high[0]) / 2


def proportion_end_error(stats: np.ndarray, confidence: float, fixed: tuple[float, float]) -> tuple[float, float]:
    """As :func:`end_error` for a proportion's interval hulled with ``fixed`` (Wilson's ends)."""
    alpha = (1 - confidence) / 2
    low = [min(v, fixed[0]) for v in quantile_range(stats, alpha)]
    high = [max(v, fixed[1]) for v in quantile_range(stats, 1 - alpha)]
    return (low[1] - low[0]) / 2, (high[1] - high[0]) / 2
