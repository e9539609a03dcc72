"""Peak memory per sweep point: a point run after a larger one reports its own peak, not the process's."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.pipeline.runner import run_point
from mathneuro.util.peak_memory import peak_memory_mb, peak_rss_mb, reset_peak_memory
from tests.test_runner import base_overrides, compose_cfg

BIG_MB = 600
# the kernel's resident-memory counters are batched per CPU, so two reads of one high-water mark can differ by
# a few pages: stages compare within this slack (a run here read 685.8 MB, then 685.7 MB)
COUNTER_SLACK_MB = 1.0


def _touch_and_free(mb: int) -> None:
    """Make this process's resident peak at least ``mb`` MB above its current use, then free the memory."""
    block = np.ones(mb * 2**20 // 8)  # written, so resident
    del block


def test_reset_starts_a_new_window_below_an_earlier_peak() -> None:
    _touch_and_free(BIG_MB)
    high = peak_rss_mb()
    if not reset_peak_memory():
        pytest.skip("this system keeps only the process's peak (no writable /proc/self/clear_refs)")
    low = peak_rss_mb()
    assert low < high - BIG_MB / 2  # the freed block no longer counts
    _touch_and_free(BIG_MB // 3)
    assert peak_rss_mb() >= low + BIG_MB / 3 * 0.9  # and the new window records what comes after
    # a CUDA entry exactly when this process has used CUDA (on a GPU machine an earlier test may have)
    expected = {"rss_mb", "cuda_mb"} if torch.cuda.is_available() and torch.cuda.is_initialized() else {"rss_mb"}
    assert set(peak_memory_mb()) == expected


def test_a_point_does_not_inherit_the_peak_of_work_done_before_it(tiny_dir, tmp_path) -> None:
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("this system keeps only the process's peak (no writable /proc/self/clear_refs)")
    _touch_and_free(BIG_MB)  # a "previous point" with a high peak, in the same process
    before = peak_rss_mb()
    cfg = compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "eval=none", "logger=none"])
    peaks = run_point(OmegaConf.to_object(cfg), tmp_path / "out")["peak_memory"]
    assert peaks["data"]["rss_mb"] < before - BIG_MB / 2
    data, load, identification = (peaks[stage]["rss_mb"] for stage in ("data", "load_model", "identification"))
    assert data <= load + COUNTER_SLACK_MB and load <= identification + COUNTER_SLACK_MB
