"""Selections as the weights an intervention writes: a neuron-level selection becomes its neurons' weights.

A weight-level selection is its masks. An MLP neuron's weights are the row that computes it in each of
the MLP's input linears (``gate_proj`` and ``up_proj``, or ``fc1``) and the column that reads it in
the output linear (``down_proj`` / ``fc2``): :func:`weight_masks` gives those for every selected
neuron, so that ``noise`` and ``finetune`` touch a neuron's rows and column and nothing else.
"""

from __future__ import annotations

import torch
from torch import nn

from mathneuro.methods.selection import Selection

MLP_OUTPUTS = ("down_proj", "fc2", "c_proj")  # the linear reading an MLP's activations


def mlp_linears(model: nn.Module, activation: str) -> tuple[str, nn.Linear, list[tuple[str, nn.Linear]]]:
    """``(output linear's name, output linear, [(input linear's name, input linear)])`` of the MLP an
    activation module belongs to; ValueError where its MLP has no output linear we know."""
    parent_name = activation.rsplit(".", 1)[0]
    parent = model.get_submodule(parent_name)
    children = [(n, m) for n, m in parent.named_children() if isinstance(m, nn.Linear)]
    outs = [(n, m) for n, m in children if n in MLP_OUTPUTS]
    if not outs:
        raise ValueError(f"intervention: {parent_name} has no {'/'.join(MLP_OUTPUTS)} linear to read its neurons")
    out_name, out = outs[0]
    inputs = [(f"{parent_name}.{n}", m) for n, m in children
              if n != out_name and m.out_features == out.in_features]
    return f"{parent_name}.{out_name}", out, inputs


def weight_masks(model: nn.Module, selection: Selection) -> dict[str, torch.Tensor]:
    """``{parameter name: bool mask}`` of every weight ``selection`` names: its masks, and for each selected
    neuron its input rows and output column (masks on one parameter are merged)."""
    masks = {name: mask.bool() for name, mask in selection.masks.items()}

    def add(name: str, mask: torch.Tensor) -> None:
        masks[name] = masks[name] | mask if name in masks else mask

    for activation, idx in selection.neurons.items():
        if not idx.numel():
            continue
        idx = idx.long().cpu()
        out_name, out, inputs = mlp_linears(model, activation)
        column = torch.zeros(out.weight.shape, dtype=torch.bool)
        column[:, idx] = True
        add(f"{out_name}.weight", column)
        for in_name, linear in inputs:
            rows = torch.zeros(linear.weight.shape, dtype=torch.bool)
            rows[idx, :] = True
            add(f"{in_name}.weight", rows)
    return masks


def by_parameter(model: nn.Module, masks: dict[str, torch.Tensor]) -> list[tuple[str, nn.Parameter, torch.Tensor]]:
    """``(name, parameter, mask)`` per distinct parameter (tied names merged: one parameter, one OR-ed mask),
    empty masks dropped; KeyError / ValueError for a name the model lacks or a mask of another shape."""
    params = dict(model.named_parameters(remove_duplicate=False))
    missing = [n for n in masks if n not in params]
    if missing:
        raise KeyError(f"selection names parameters the model lacks: {missing[:3]}")
    seen: dict[int, int] = {}
    out: list[tuple[str, nn.Parameter, torch.Tensor]] = []
    for name, mask in masks.items():
        param = params[name]
        if tuple(mask.shape) != tuple(param.shape):
            raise ValueError(f"mask for {name} has shape {tuple(mask.shape)}, weight {tuple(param.shape)}")
        if not bool(mask.any()):
            continue
        if id(param) in seen:
            i = seen[id(param)]
            out[i] = (out[i][0], param, out[i][2] | mask.bool())
        else:
            seen[id(param)] = len(out)
            out.append((name, param, mask.bool()))
    return out
