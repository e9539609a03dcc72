"""Stage 2, statistics: the only forward passes (:mod:`~mathneuro.statistics.passes`: per-linear input
norms, MLP activation counts) and their on-disk cache shared by a sweep's processes
(:mod:`~mathneuro.statistics.cache`)."""

from mathneuro.statistics.passes import (
    AUTO_COMPILE_MIN_WEIGHTS,
    KERNELS,
    KIND_ALIASES,
    KINDS,
    Statistics,
    canonical_kind,
    collect_statistics,
    hooks,
    length_sorted_batches,
    masked_square_sums,
    square_sum_kernel,
    tokenize,
)

__all__ = [
    "AUTO_COMPILE_MIN_WEIGHTS", "KERNELS", "KINDS", "KIND_ALIASES", "canonical_kind", "Statistics", "collect_statistics", "hooks",
    "length_sorted_batches", "masked_square_sums", "square_sum_kernel", "tokenize",
]
