"""experiments/benchmarks/dtype_selection_overlap.py: its selections are the runner's, in each point's dtype."""

from __future__ import annotations

import torch

from mathneuro.methods import mathneuro_selection
from mathneuro.statistics.passes import Statistics

from .conftest import load_experiment


def _stats(gen: torch.Generator, modules: dict[str, int]) -> Statistics:
    tensors = {f"{m}::norm": torch.rand(d_in, generator=gen) for m, d_in in modules.items()}
    return Statistics("linear_inputs", tensors, 4, 40)


def test_selections_match_the_library_in_float32_and_use_the_points_dtype() -> None:
    script = load_experiment("benchmarks/dtype_selection_overlap")
    gen = torch.Generator().manual_seed(0)
    weights = {"layers.0.mlp.up_proj.weight": torch.randn(16, 32, generator=gen),
               "layers.0.self_attn.q_proj.weight": torch.randn(32, 32, generator=gen)}
    modules = {"layers.0.mlp.up_proj": 32, "layers.0.self_attn.q_proj": 32}
    task, filt = _stats(gen, modules), _stats(gen, modules)
    for dtype, torch_dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        point = {"dtype": dtype, "task": task, "filter": filt}
        m, math = script.selections(weights, point, 0.2)
        rounded = {name: w.to(torch_dtype) for name, w in weights.items()}
        expected = mathneuro_selection(rounded, task, [filt], 0.2)
        for name in weights:
            assert torch.equal(m[name], expected.masks[name])
            assert int(math[name].sum()) == int(0.2 * weights[name].numel())  # floor, as topk_count
            assert not (m[name] & ~math[name]).any()  # M lies inside the math top-K set
