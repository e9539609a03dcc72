"""Stage 2, statistics: the only forward passes (:mod:`~mathneuro.statistics.passes`, collecting every
registered statistics kind, :mod:`~mathneuro.statistics.kinds`: per-linear input norms, MLP activation
counts, a user's kinds) and their on-disk cache shared by a sweep's processes (:mod:`~mathneuro.statistics.cache`)."""

from mathneuro.statistics.kinds import STATISTICS_KINDS, StatisticsKindSpec, register_statistics_kind
from mathneuro.statistics.passes import (
    AUTO_COMPILE_MIN_WEIGHTS,
    KERNELS,
    Statistics,
    collect_statistics,
    hooks,
    length_sorted_batches,
    masked_square_sums,
    square_sum_kernel,
    tokenize,
)

__all__ = [
    "AUTO_COMPILE_MIN_WEIGHTS", "KERNELS", "STATISTICS_KINDS", "Statistics", "StatisticsKindSpec", "collect_statistics",
    "hooks", "length_sorted_batches", "masked_square_sums", "register_statistics_kind", "square_sum_kernel", "tokenize",
]
