"""Interventions: multiply selected weights (or MLP neuron activations) by a scalar, undoably.

``scalar = 0`` prunes; ``scalar = 1.1`` scales up. Weight edits happen in place and keep the
original values of the touched entries, so :meth:`Intervention.undo` restores every parameter
bit for bit and one loaded model serves a whole grid of K × scalar × method. Neuron edits
are forward hooks on the MLP activation modules, removed on undo.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from mathneuro.methods.selection import Selection


def check_scalar(scalar: float, key: str = "intervention.scalar") -> float:
    """``scalar`` as a float if finite, else a ValueError naming ``key``."""
    if isinstance(scalar, bool) or not isinstance(scalar, (int, float)) or not math.isfinite(scalar):
        raise ValueError(f"{key}: must be a finite number, got {scalar!r}")
    return float(scalar)


class Intervention:
    """A handle on an applied edit: ``undo()`` (or leaving the ``with`` block) reverts it exactly."""

    def __init__(self) -> None:
        self._saved: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (flat param, index, original)
        self._hooks: list = []
        self.active = True

    def undo(self) -> None:
        """Restore the touched weights and remove activation hooks; idempotent."""
        if not self.active:
            return
        with torch.no_grad():
            for flat, index, original in reversed(self._saved):
                flat.index_copy_(0, index, original)
        for handle in self._hooks:
            handle.remove()
        self._saved.clear()
        self._hooks.clear()
        self.active = False

    def __enter__(self) -> Intervention:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def _scale_hook(indices: torch.Tensor, scalar: float):
    cache: dict[torch.device, torch.Tensor] = {}

    def hook(_module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        idx = cache.get(output.device)
        if idx is None:
            idx = cache[output.device] = indices.to(output.device)
        output = output.clone()
        output[..., idx] *= scalar
        return output

    return hook


@torch.no_grad()
def apply_intervention(model: nn.Module, selection: Selection, scalar: float) -> Intervention:
    """Multiply every selected weight, and every selected neuron's activation, by ``scalar``."""
    scalar = check_scalar(scalar)
    params = dict(model.named_parameters(remove_duplicate=False))
    modules = dict(model.named_modules())
    missing = [n for n in selection.masks if n not in params] + [n for n in selection.neurons if n not in modules]
    if missing:
        raise KeyError(f"selection names parameters/modules the model lacks: {missing[:3]}")
    handle = Intervention()
    try:
        for name, mask in selection.masks.items():
            param = params[name]
            if mask.shape != param.shape:
                raise ValueError(f"mask for {name} has shape {tuple(mask.shape)}, weight {tuple(param.shape)}")
            if not bool(mask.any()):
                continue
            # flat indices: index_select/index_copy_ are several times faster than boolean indexing
            index = mask.reshape(-1).nonzero().squeeze(1).to(param.device)
            flat = param.data.view(-1)
            original = flat.index_select(0, index)
            handle._saved.append((flat, index, original))
            flat.index_copy_(0, index, original * scalar)
        for name, idx in selection.neurons.items():
            if idx.numel():
                handle._hooks.append(modules[name].register_forward_hook(_scale_hook(idx, scalar)))
    except Exception:
        handle.undo()
        raise
    return handle
