"""Train selected entries of weight matrices, with state proportional to the selection, not the model.

:class:`SparseTrainable` keeps the selected entries of every touched matrix as one flat float32
vector (the optimizer's only parameter, so its state, e.g. AdamW's two moments, is 8 bytes per
selected weight). Only the touched matrices require gradients; a post-accumulate-grad hook on each
gathers its selected entries' gradient into the vector's and frees the dense one at once, so one
matrix's dense gradient lives at a time. After each optimizer step the vector is written back into
the selected entries (:meth:`SparseTrainable.write_back`): every other entry of every parameter is
never written and stays bit-identical.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mathneuro.edit.undoable import flat_index

OPTIMIZERS = ("adamw", "adam", "sgd")


class SparseTrainable:
    """The selected entries of ``entries`` (``(name, parameter, bool mask)``, one per distinct parameter) as
    one trainable flat vector; :meth:`release` takes the hooks off and restores ``requires_grad``."""

    def __init__(self, entries: Sequence[tuple[str, nn.Parameter, torch.Tensor]], model: nn.Module) -> None:
        self.model = model
        self.slices: list[tuple[str, nn.Parameter, torch.Tensor, int, int]] = []
        offset = 0
        values = []
        for name, param, mask in entries:
            index = flat_index(mask, param.device)
            values.append(param.detach().reshape(-1).index_select(0, index).float())
            self.slices.append((name, param, index, offset, index.numel()))
            offset += index.numel()
        device = self.slices[0][1].device if self.slices else torch.device("cpu")
        self.vector = (torch.cat(values) if values else torch.zeros(0)).to(device).requires_grad_(True)
        self.vector.grad = torch.zeros_like(self.vector)
        self._flags = {id(p): (p, p.requires_grad) for p in model.parameters()}
        self._hooks: list = []
        self.attach()

    def attach(self) -> None:
        """Freeze every parameter but the selected ones' and hook those to gather their gradients."""
        for p in self.model.parameters():
            p.requires_grad_(False)
        for _name, param, index, start, n in self.slices:
            param.requires_grad_(True)
            self._hooks.append(param.register_post_accumulate_grad_hook(self._gather(index, start, n)))

    def detach(self) -> None:
        """Take the gradient hooks off (:meth:`attach` puts them back)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks.clear()

    def _gather(self, index: torch.Tensor, start: int, n: int):
        def hook(param: torch.Tensor) -> None:
            grad = param.grad
            param.grad = None  # the dense gradient is dropped as soon as its selected entries are read
            self.vector.grad[start:start + n].add_(grad.reshape(-1).index_select(0, index).float())
        return hook

    def __len__(self) -> int:
        return self.vector.numel()

    def zero_grad(self) -> None:
        self.vector.grad.zero_()

    @torch.no_grad()
    def write_back(self) -> None:
        """Put the vector's values into the selected entries (cast to each parameter's dtype)."""
        for _name, param, index, start, n in self.slices:
            param.data.view(-1).index_copy_(0, index, self.vector[start:start + n].to(param.dtype))

    def counts(self) -> dict[str, int]:
        """Trained entries per parameter name."""
        return {name: n for name, _p, _i, _s, n in self.slices}

    def release(self) -> None:
        """Remove the gradient hooks, drop any gradient, restore every parameter's ``requires_grad``."""
        self.detach()
        for param, flag in self._flags.values():
            param.grad = None
            param.requires_grad_(flag)
        self._flags.clear()


def make_optimizer(name: str, params: list[torch.Tensor], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """The optimizer ``name`` (:data:`OPTIMIZERS`) over ``params``."""
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, foreach=False)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay, foreach=False)
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, weight_decay=weight_decay)
    raise ValueError(f"intervention.optimizer: unknown value {name!r}; allowed: {', '.join(OPTIMIZERS)}")


def state_bytes(optimizer: torch.optim.Optimizer) -> int:
    """Bytes held by the optimizer's state tensors."""
    return sum(v.numel() * v.element_size() for state in optimizer.state.values() for v in state.values()
               if isinstance(v, torch.Tensor) and v.dim() > 0)
