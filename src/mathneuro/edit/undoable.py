"""The undoable edit every intervention returns (:class:`Intervention`), and the scalar edit itself.

:func:`apply_intervention` multiplies selected weights (or MLP neuron activations) by a scalar:
``scalar = 0`` prunes; ``scalar = 1.1`` scales up. Weight edits happen in place and keep the
original values of the touched entries (:meth:`Intervention.save`), so :meth:`Intervention.undo`
restores every parameter bit for bit and one loaded model serves a whole grid of K × scalar ×
method. Neuron edits are forward hooks, removed on undo. The registered interventions (scale,
prune, noise, mean_ablate, finetune, yours) live in :mod:`mathneuro.edit.interventions`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from mathneuro.methods.selection import Selection


def check_scalar(scalar: float, key: str = "intervention.scalar") -> float:
    """``scalar`` as a float if finite, else a ValueError naming ``key``."""
    if isinstance(scalar, bool) or not isinstance(scalar, (int, float)) or not math.isfinite(scalar):
        raise ValueError(f"{key}: must be a finite number, got {scalar!r}")
    return float(scalar)


class Intervention:
    """A handle on an applied edit: ``undo()`` (or leaving the ``with`` block) reverts it exactly.

    An intervention calls :meth:`save` before it writes into a weight (the touched entries' original
    values are kept), :meth:`hook` for every hook it registers and :meth:`on_undo` for anything else
    to restore; ``record`` holds what ``results.json`` records of the edit (its ``intervention`` block);
    ``bake`` (optional) is a context manager factory that turns hook edits into weights while the
    edited model is exported.
    """

    def __init__(self) -> None:
        self._saved: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (flat param, index, original)
        self._hooks: list = []
        self._callbacks: list[Callable[[], None]] = []
        self.record: dict[str, Any] = {}
        self.bake: Callable[[], contextlib.AbstractContextManager] | None = None
        self.active = True

    @torch.no_grad()
    def save(self, param: torch.Tensor, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keep the original values of ``param``'s flat entries ``index`` for the undo; returns
        ``(flat view of param, original values)``."""
        flat = param.data.view(-1)
        original = flat.index_select(0, index)
        self._saved.append((flat, index, original))
        return flat, original

    def hook(self, handle: Any) -> None:
        """A hook handle (``.remove()``) taken off on undo."""
        self._hooks.append(handle)

    def on_undo(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` on undo, before the saved weights are restored."""
        self._callbacks.append(fn)

    def undo(self) -> None:
        """Restore the touched weights and remove activation hooks; idempotent."""
        if not self.active:
            return
        for fn in reversed(self._callbacks):
            fn()
        with torch.no_grad():
            for flat, index, original in reversed(self._saved):
                flat.index_copy_(0, index, original)
        for handle in self._hooks:
            handle.remove()
        self._saved.clear()
        self._hooks.clear()
        self._callbacks.clear()
        self.active = False

    @contextlib.contextmanager
    def baked(self, name: str = "this intervention") -> Iterator[None]:
        """While inside: the edit as plain weights, for ``save_pretrained`` (hooks are invisible to it).
        An edit made of weights alone needs nothing; a hook edit without ``bake`` is a ValueError."""
        if self.bake is not None:
            with self.bake():
                yield
            return
        if self._hooks:
            raise ValueError(f"export_model: {name} edits activations through hooks, which a saved model "
                             "cannot hold; export_model=false")
        yield

    def __enter__(self) -> Intervention:
        return self

    def __exit__(self, *exc) -> None:
        self.undo()


def flat_index(mask: torch.Tensor, device: torch.device | str) -> torch.Tensor:
    """The flat int64 indices of a boolean mask's True entries, on ``device`` (index_select / index_copy_
    are several times faster than boolean indexing)."""
    return mask.reshape(-1).nonzero().squeeze(1).to(device)


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
            index = flat_index(mask, param.device)
            flat, original = handle.save(param, index)
            flat.index_copy_(0, index, original * scalar)
        for name, idx in selection.neurons.items():
            if idx.numel():
                handle.hook(modules[name].register_forward_hook(_scale_hook(idx, scalar)))
    except Exception:
        handle.undo()
        raise
    return handle
