"""MathNeuro: per weight matrix, top-K of the task score minus the union of each filter's top-K
(docs/method.md)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Optional

import torch

from mathneuro.methods.registry import register_method
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import ExtraSelection, LinearMethodConfig, MethodInputs
from mathneuro.methods.topk import check_fraction, module_of, topk_count, topk_mask, weight_scores
from mathneuro.statistics.passes import Statistics


@dataclass
class MathNeuroConfig(LinearMethodConfig):
    name: str = "mathneuro"
    filter_top_k: Optional[float] = None  # K of the filter side (default: top_k)

    def validate(self, key: str = "method") -> None:
        if self.filter_top_k is not None:
            check_fraction(self.filter_top_k, f"{key}.filter_top_k")


def mathneuro_selection(
    weights: Mapping[str, torch.Tensor],
    task: Statistics,
    filters: Sequence[Statistics],
    top_k: float,
    filter_top_k: float | None = None,
) -> Selection:
    """M = top-K(math score) \\ ∪_f top-K(filter f score), per weight matrix
    (docs/method.md#2-top-k-and-the-set-difference)."""
    check_fraction(top_k)
    filter_top_k = check_fraction(filter_top_k, "filter_top_k") if filter_top_k is not None else top_k
    if not filters:
        raise ValueError("method=mathneuro needs at least one filter dataset")
    masks = {}
    for name, weight in weights.items():
        module = module_of(name)
        keep = topk_mask(weight_scores(weight, task.get(module, "norm")), topk_count(weight.numel(), top_k))
        k_f = topk_count(weight.numel(), filter_top_k)
        for stats in filters:
            keep &= ~topk_mask(weight_scores(weight, stats.get(module, "norm")), k_f)
        masks[name] = keep.cpu()
    return Selection(masks, method="mathneuro", meta={"top_k": top_k, "filter_top_k": filter_top_k})


@register_method("mathneuro", needs=("linear_inputs",), config=MathNeuroConfig, topk_per_matrix=True,
                 extra_selections={"topk": ExtraSelection("wanda", "math top-K (M before the filter)")},
                 empty_hint="every weight of the task's top-K is also in the filter's; try a larger top_k or a "
                            "smaller method.filter_top_k")
def mathneuro_method(inputs: MethodInputs, cfg: MathNeuroConfig) -> Selection:
    """Top-K of the task score minus the union of the filters' top-K, per matrix."""
    return mathneuro_selection(inputs.weights, inputs.task["linear_inputs"], inputs.filter_stats("linear_inputs"),
                               inputs.top_k, filter_top_k=cfg.filter_top_k)
