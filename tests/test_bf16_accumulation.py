"""experiments/benchmarks/bf16_accumulation.py: the original's bf16 accumulation is emulated faithfully."""

from __future__ import annotations

import torch

from .conftest import load_experiment


def load_script():
    return load_experiment("benchmarks/bf16_accumulation")


def test_bf16_sum_rounds_every_step_and_float32_does_not() -> None:
    script = load_script()
    weight = torch.ones(2, 3)
    norms = torch.ones(300, 3)  # 300 samples of norm 1
    assert torch.equal(script.scores_f32(weight, norms), torch.full((2, 3), 300.0))
    # bf16 has 8 significant bits: from 256 on, adding 1 rounds back to 256 (ties to even)
    assert torch.equal(script.scores_bf16(weight, norms), torch.full((2, 3), 256.0))
    one = torch.tensor([[1.2345, 3.3333, 7.0001]])
    w = torch.tensor([[0.1111, -0.7777, 2.5]])
    expected = (w.abs().bfloat16() * one.bfloat16()).float()  # one bf16 product, rounded once
    assert torch.equal(script.scores_bf16(w, one), expected)


def test_selections_give_m_inside_the_math_topk() -> None:
    script = load_script()
    gen = torch.Generator().manual_seed(0)
    weights = {"layers.0.mlp.up_proj.weight": torch.randn(8, 16, generator=gen)}
    math = {"layers.0.mlp.up_proj": torch.rand(5, 16, generator=gen)}
    other = {"layers.0.mlp.up_proj": torch.rand(5, 16, generator=gen)}
    m_sets, top_sets = script.selections(weights, math, other, 0.25, script.scores_f32)
    name = "layers.0.mlp.up_proj.weight"
    assert int(top_sets[name].sum()) == 32 and not (m_sets[name] & ~top_sets[name]).any()
