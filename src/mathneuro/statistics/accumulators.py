"""The accumulators of the built-in statistics kinds (:mod:`mathneuro.statistics.kinds`).

- ``linear_inputs``: per scored linear and input column j, over samples s,
  ``norm[j] = Σ_s ||X_s[:, j]||₂`` (MathNeuro, docs/method.md#1-importance-of-a-weight) and
  ``sq[j] = Σ_s Σ_t X_s[t, j]²`` (Wanda proper), float32 whatever the model dtype.
- ``activation_counts``: per MLP activation module and neuron n, the number of real tokens on which the
  activation output is > 0 (LAPE, docs/method.md#4-baselines).
"""

from __future__ import annotations

import torch
from torch import nn

from mathneuro.statistics.kinds import register_statistics_kind
from mathneuro.statistics.passes import square_sum_kernel


@register_statistics_kind("linear_inputs", modules="linears", hook="input",
                          description="per scored linear and input column: sum of L2 norms and of squares")
class LinearInputsAccumulator:
    """Forward pre-hook state for every target linear; shares work between linears fed the same tensor."""

    def __init__(self, targets: dict[str, nn.Linear], kernel: str = "auto"):
        self.norm: dict[str, torch.Tensor] = {}
        self.sq: dict[str, torch.Tensor] = {}
        self.mask: torch.Tensor | None = None  # [B, T], 1 on real tokens
        self._last_input: torch.Tensor | None = None
        self._last_result: tuple[torch.Tensor, torch.Tensor] | None = None
        first = next(iter(targets.values()), None)
        self.square_sums = square_sum_kernel(kernel, sum(m.weight.numel() for m in targets.values()),
                                             first.weight.device if first is not None else "cpu")
        for name, mod in targets.items():
            dev = mod.weight.device
            self.norm[name] = torch.zeros(mod.in_features, dtype=torch.float32, device=dev)
            self.sq[name] = torch.zeros(mod.in_features, dtype=torch.float32, device=dev)

    def new_batch(self, mask: torch.Tensor, padded: bool) -> None:
        """Start a batch: ``mask`` [B, T], 1 on real tokens."""
        self.mask = mask
        self._last_input = None
        self._last_result = None

    def hook(self, name: str):
        """The forward pre-hook of linear ``name``."""
        def pre_hook(_module: nn.Module, args: tuple) -> None:
            x = args[0]
            if x is self._last_input and self._last_result is not None:
                norm_b, sq_b = self._last_result  # q/k/v (and gate/up) read one tensor: reuse its sums
            else:
                per_sample = self.square_sums(x, self.mask.to(x.device))  # [B, d] float32
                norm_b = per_sample.sqrt().sum(dim=0)
                sq_b = per_sample.sum(dim=0)
                self._last_input, self._last_result = x, (norm_b, sq_b)
            self.norm[name] += norm_b.to(self.norm[name].device)
            self.sq[name] += sq_b.to(self.sq[name].device)

        return pre_hook

    def state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The live accumulators by group (what a checkpoint saves)."""
        return {"norm": self.norm, "sq": self.sq}

    def tensors(self) -> dict[str, torch.Tensor]:
        """``<linear>::norm`` and ``<linear>::sq``, on the CPU."""
        out = {}
        for name in self.norm:
            out[f"{name}::norm"] = self.norm[name].cpu()
            out[f"{name}::sq"] = self.sq[name].cpu()
        return out


@register_statistics_kind("activation_counts", modules="mlp_activations", hook="output",
                          description="per MLP neuron: the real tokens on which its activation is > 0")
class ActivationCountsAccumulator:
    """Forward hook state counting, per MLP neuron, the real tokens with activation > 0."""

    def __init__(self, activations: dict[str, nn.Module], kernel: str = "auto"):
        self.names = list(activations)
        self.positive: dict[str, torch.Tensor] = {}
        self.token_mask: torch.Tensor | None = None  # [B, T, 1] bool, None without padding

    def new_batch(self, mask: torch.Tensor, padded: bool) -> None:
        """Start a batch: ``mask`` [B, T], 1 on real tokens (unused when nothing is padded)."""
        self.token_mask = mask.bool().unsqueeze(-1) if padded else None

    def hook(self, name: str):
        """The forward hook of activation module ``name``."""
        def fwd_hook(_module: nn.Module, _args: tuple, output: torch.Tensor) -> None:
            pos = output > 0
            if self.token_mask is not None:
                pos &= self.token_mask.to(pos.device)
            counts = pos.sum(dim=(0, 1))
            if name in self.positive:  # (a resumed pass's saved counts may sit on another device)
                self.positive[name] += counts.to(self.positive[name].device)
            else:
                self.positive[name] = counts.to(torch.int64)

        return fwd_hook

    def state(self) -> dict[str, dict[str, torch.Tensor]]:
        """The live counts (what a checkpoint saves)."""
        return {"positive": self.positive}

    def tensors(self) -> dict[str, torch.Tensor]:
        """``<activation>::positive``, on the CPU."""
        return {f"{name}::positive": self.positive[name].cpu() for name in self.names}
