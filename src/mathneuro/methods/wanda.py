"""Wanda as the paper ablates it (top-K of the task score alone, per matrix) and Wanda proper
(|W|·sqrt(Σx²), top-K within each output row)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch

from mathneuro.methods.registry import register_method
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import LinearMethodConfig, MethodInputs, per_row_min_top_k
from mathneuro.methods.topk import (
    check_fraction,
    module_of,
    topk_count,
    topk_mask,
    topk_mask_rows,
    weight_scores,
)
from mathneuro.statistics.passes import Statistics


@dataclass
class WandaConfig(LinearMethodConfig):
    name: str = "wanda"


def wanda_selection(
    weights: Mapping[str, torch.Tensor], task: Statistics, top_k: float, per_row: bool = False
) -> Selection:
    """Top-K of the task score alone. ``per_row=False``: the paper's Wanda ablation (MathNeuro's
    score, per matrix). ``per_row=True``: Wanda proper, |W|·sqrt(Σx²) compared within each output row."""
    check_fraction(top_k)
    masks = {}
    for name, weight in weights.items():
        module = module_of(name)
        if per_row:
            scores = weight_scores(weight, task.get(module, "sq").sqrt())
            masks[name] = topk_mask_rows(scores, topk_count(weight.shape[1], top_k)).cpu()
        else:
            scores = weight_scores(weight, task.get(module, "norm"))
            masks[name] = topk_mask(scores, topk_count(weight.numel(), top_k)).cpu()
    method = "wanda_row" if per_row else "wanda"
    return Selection(masks, method=method, meta={"top_k": top_k})


@register_method("wanda", needs=("linear_inputs",), config=WandaConfig, topk_per_matrix=True,
                 uses_filters=False)
def wanda_method(inputs: MethodInputs, cfg: WandaConfig) -> Selection:
    """The paper's Wanda ablation: top-K of the task score alone, per matrix."""
    return wanda_selection(inputs.weights, inputs.task["linear_inputs"], inputs.top_k)

@register_method("wanda_row", needs=("linear_inputs",), config=WandaConfig, uses_filters=False,
                 min_top_k=per_row_min_top_k)
def wanda_row_method(inputs: MethodInputs, cfg: WandaConfig) -> Selection:
    """Wanda proper: |W|·sqrt(Σx²), top-K within each output row."""
    return wanda_selection(inputs.weights, inputs.task["linear_inputs"], inputs.top_k, per_row=True)
