"""How many independent examples D identification draws over the same n examples are worth.

Draws are clustered in examples: when every draw changes the same examples, D draws are worth n
examples; when draws change examples independently, n x D. Newcombe's interval for 0/1 metrics
(:mod:`mathneuro.report.inference`) uses this effective size (ANALYSIS_PLAN.md, amendment of 2026-12-06).
"""

from __future__ import annotations

import numpy as np


def draw_correlation(d: np.ndarray) -> float:
    """The intraclass correlation of per-example differences across draws (``[draws, n]``), in [0, 1]:
    1 when every draw changes the same examples the same way, 0 when draws vary independently."""
    draws, n = d.shape
    if draws < 2 or n < 2:
        return 1.0
    means = d.mean(axis=0)
    between = draws * float(np.sum((means - means.mean()) ** 2)) / (n - 1)
    within = float(np.sum((d - means) ** 2)) / (n * (draws - 1))
    denominator = between + (draws - 1) * within
    if denominator <= 0:
        return 1.0
    return min(1.0, max(0.0, (between - within) / denominator))


def effective_examples(d: np.ndarray) -> float:
    """``n * D / (1 + (D - 1) * rho)``, rho the :func:`draw_correlation`: n when the draws agree, n x D
    when they vary independently."""
    draws, n = d.shape
    return n * draws / (1 + (draws - 1) * draw_correlation(d))
