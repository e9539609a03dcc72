"""Coverage of the draws + examples bootstrap (ANALYSIS_PLAN.md §4) on simulated paired 0/1 records.

    .venv/bin/python experiments/benchmarks/bootstrap_coverage.py [--reps 400]

Each simulated evaluation: 5 identification draws, 150 examples, half of them right under the
reference; the edit flips a right answer to wrong with probability 0.18 and a wrong one to right
with 0.08 (true mean difference -0.05), both shifted per draw by N(0, draw_sd); an example's chance
to flip is shared by the draws with probability ``shared`` (the same questions break under every
draw) and drawn afresh otherwise. The table gives how often the 95 % percentile interval
(400 resamples, D - 1 draws per resample, :func:`mathneuro.report.inference.hierarchical_bootstrap`)
covers -0.05.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from mathneuro.report.inference import hierarchical_bootstrap, percentile_interval

TRUTH = -0.05


def simulate(rng: np.random.Generator, *, draws: int, n: int, draw_sd: float, shared: float) -> np.ndarray:
    """Per-draw, per-example differences edited - reference (values -1, 0, 1)."""
    ref = (rng.random(n) < 0.5).astype(float)
    shift = rng.normal(0.0, draw_sd, size=(draws, 1))
    q_up, q_down = np.clip(0.08 + shift, 0, 1), np.clip(0.18 - shift, 0, 1)
    u = np.where(rng.random((draws, n)) < shared, rng.random(n), rng.random((draws, n)))
    edited = np.where(ref == 1, (u >= q_down).astype(float), (u < q_up).astype(float))
    return edited - ref


def coverage(shared: float, draw_sd: float, reps: int, *, draws: int = 5, n: int = 150) -> float:
    rng = np.random.default_rng(1)
    hits = 0
    for k in range(reps):
        d = simulate(rng, draws=draws, n=n, draw_sd=draw_sd, shared=shared)
        low, high = percentile_interval(hierarchical_bootstrap(d, resamples=400, seed=k), 0.95)
        hits += low <= TRUTH <= high
    return hits / reps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=400, help="simulated evaluations per cell (default: %(default)s)")
    args = parser.parse_args(argv)
    sds = (0.0, 0.02, 0.05)
    print("| flips shared by the draws | " + " | ".join(f"draw sd {sd:g}" for sd in sds) + " |")
    print("|---|" + "---|" * len(sds))
    for shared in (0.0, 0.8, 0.95):
        cells = [f"{coverage(shared, sd, args.reps):.3f}" for sd in sds]
        print(f"| {shared:g} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
