"""``mean_ablate``: replace each selected MLP neuron's activation by its mean over the task set.

A neuron's activation is what the MLP's output linear reads (``down_proj``'s input: ``act(gate) * up``
in a gated MLP, ``act(fc1)`` otherwise). Its mean is taken over every token of the point's task
samples (padding excluded), in float64, with the model unedited; then a forward pre-hook on each
output linear puts that constant in the selected columns of its input, for every token. Weight-level
selections are refused: a weight has no activation of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from mathneuro.edit.interventions.registry import register_intervention
from mathneuro.edit.interventions.spec import InterventionConfig, InterventionContext
from mathneuro.edit.interventions.units import mlp_linears
from mathneuro.edit.undoable import Intervention
from mathneuro.models.targets import base_model
from mathneuro.statistics.passes import length_sorted_batches, tokenize
from mathneuro.util.padding import pad_token_id, right_padded


@dataclass
class MeanAblateConfig(InterventionConfig):
    name: str = "mean_ablate"


@torch.no_grad()
def neuron_means(model: nn.Module, tokenizer, texts: list[str], neurons: dict[str, torch.Tensor], *,
                 max_length: int, batch_size: int) -> dict[str, torch.Tensor]:
    """``{activation module: float64 mean of each listed neuron's activation}`` over every token of ``texts``."""
    outputs = {name: mlp_linears(model, name)[1] for name in neurons}
    sums = {name: torch.zeros(idx.numel(), dtype=torch.float64) for name, idx in neurons.items()}
    state: dict[str, torch.Tensor] = {}
    count = 0

    def collect(name: str, idx: torch.Tensor):
        def hook(_module: nn.Module, args: tuple) -> None:
            keep = state["mask"].to(args[0].device).reshape(-1)
            values = args[0].reshape(-1, args[0].shape[-1])[keep][:, idx.to(args[0].device)]
            sums[name] += values.double().sum(0).cpu()
        return hook

    handles = [outputs[name].register_forward_pre_hook(collect(name, idx.long())) for name, idx in neurons.items()]
    try:
        rows = tokenize(tokenizer, texts, max_length)
        device = next(model.parameters()).device
        for batch in length_sorted_batches([len(r) for r in rows], batch_size):
            input_ids, attn = right_padded([rows[i] for i in batch], pad_token_id(tokenizer))
            state["mask"] = attn.bool()
            count += int(attn.sum())
            base_model(model)(input_ids=input_ids.to(device), attention_mask=attn.to(device))
    finally:
        for handle in handles:
            handle.remove()
    return {name: total / max(count, 1) for name, total in sums.items()}


def _replace_hook(idx: torch.Tensor, means: torch.Tensor):
    def hook(_module: nn.Module, args: tuple) -> tuple:
        x = args[0].clone()
        x[..., idx.to(x.device)] = means.to(device=x.device, dtype=x.dtype)
        return (x, *args[1:])
    return hook


@register_intervention("mean_ablate", config=MeanAblateConfig, units=("neurons",), needs=("task_samples",),
                       exportable=False, description="replace each selected neuron's activation by its task-set mean")
def mean_ablate(ctx: InterventionContext, cfg: MeanAblateConfig) -> Intervention:
    """Hook every selected neuron's activation to its mean over the point's task samples."""
    neurons = {name: idx.long() for name, idx in ctx.selection.neurons.items() if idx.numel()}
    means = neuron_means(ctx.model, ctx.tokenizer, ctx.require("task_samples"), neurons,
                         max_length=ctx.max_length, batch_size=ctx.batch_size)
    handle = Intervention()
    for name, idx in neurons.items():
        handle.hook(mlp_linears(ctx.model, name)[1].register_forward_pre_hook(_replace_hook(idx, means[name])))
    handle.record = {"task": ctx.task_name, "task_ids_hash": ctx.task_ids_hash,
                     "num_neurons": int(sum(i.numel() for i in neurons.values())),
                     "mean_of_means": float(torch.cat(list(means.values())).mean()) if means else None}
    return handle
