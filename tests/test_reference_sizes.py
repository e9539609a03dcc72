"""A random reference reads its sizing method's counts from the workbench when that selection was just made
on the same statistics and weights (a sweep's MathNeuro point, then its random point), and never after the
weights changed."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from mathneuro.pipeline.workbench import get_workbench, prepare_samples
from tests.test_runner import base_overrides, compose_cfg


@pytest.fixture()
def bench_and_samples(tiny_dir, tmp_path):
    cfg = OmegaConf.to_object(compose_cfg([*base_overrides(tiny_dir, tmp_path / "cache"), "logger=none"]))
    bench = get_workbench(cfg)
    task = prepare_samples(cfg.task, "task", cfg.num_samples, 0, True)
    other = prepare_samples(cfg.filter, "filter", cfg.num_samples, 1, True)

    def select(name: str):
        return bench.select({"name": name}, task, [other], top_k=0.2, seed=3, max_length=64, batch_size=4,
                            progress=False)[0]

    return bench, select


def test_random_is_sized_by_the_remembered_counts_of_the_same_selection(bench_and_samples):
    bench, select = bench_and_samples
    m = select("mathneuro")
    [sizes] = [s for s in bench.sizes.values() if s]
    [key] = [k for k in sizes if '"mathneuro"' in k]
    unit, counts, meta = sizes[key]
    assert unit == "weights" and counts == m.counts() and meta == m.meta
    assert select("random").counts() == m.counts()
    tampered = {name: max(0, n - 1) for name, n in counts.items()}  # what random draws must come from here
    sizes[key] = (unit, tampered, meta)
    assert select("random").counts() == tampered


def test_nothing_remembered_is_used_once_the_weights_changed(bench_and_samples):
    bench, select = bench_and_samples
    m = select("mathneuro")
    for sizes in bench.sizes.values():
        for key, (unit, counts, meta) in list(sizes.items()):
            sizes[key] = (unit, {name: 0 for name in counts}, meta)  # a stale size would select nothing
    weight = next(iter(bench.targets(object()).values())).weight  # the default targets
    original = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.mul_(2.0)  # an edit: the same statistics, other weights
        edited = select("random")
        assert sum(edited.counts().values()) > 0
        assert sum(edited.counts().values()) == sum(select("mathneuro").counts().values())
    finally:
        with torch.no_grad():
            weight.copy_(original)
    assert select("random").counts() == {name: 0 for name in m.counts()}  # the weights as they were: remembered
