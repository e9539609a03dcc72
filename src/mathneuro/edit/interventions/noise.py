"""``noise``: add seeded Gaussian noise to the selected weights, its standard deviation a set fraction
(``intervention.relative_std``) of each matrix's own standard deviation.

A neuron-level selection adds it to its neurons' weights (their input rows and output column,
:func:`~mathneuro.edit.interventions.units.weight_masks`). The draw is seeded by
``intervention.seed`` (default: the point's seed), one generator walked over the matrices in name
order, so a point and its random reference of the same seed draw from one stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from mathneuro.edit.interventions.registry import register_intervention
from mathneuro.edit.interventions.spec import InterventionConfig, InterventionContext, check_positive
from mathneuro.edit.interventions.units import by_parameter, weight_masks
from mathneuro.edit.undoable import Intervention, flat_index


@dataclass
class NoiseConfig(InterventionConfig):
    name: str = "noise"
    relative_std: float = 0.1  # the noise's std as a fraction of each matrix's std
    seed: Optional[int] = None  # None: the point's seed

    def validate(self, key: str = "intervention") -> None:
        check_positive(self.relative_std, f"{key}.relative_std")


@register_intervention("noise", config=NoiseConfig, units=("weights", "neurons"),
                       point_fields=("relative_std", "seed"),
                       description="add Gaussian noise of relative_std x each matrix's std to the selection")
@torch.no_grad()
def noise(ctx: InterventionContext, cfg: NoiseConfig) -> Intervention:
    """Add N(0, (relative_std · std(W))²) to every selected entry of every matrix W."""
    seed = ctx.seed if cfg.seed is None else int(cfg.seed)
    generator = torch.Generator().manual_seed(seed)
    handle = Intervention()
    stds: dict[str, float] = {}
    try:
        for name, param, mask in sorted(by_parameter(ctx.model, weight_masks(ctx.model, ctx.selection)),
                                        key=lambda item: item[0]):
            index = flat_index(mask, param.device)
            std = float(param.detach().float().std())
            draw = torch.randn(index.numel(), generator=generator, dtype=torch.float32)
            flat, original = handle.save(param, index)
            flat.index_copy_(0, index, (original.float() + (cfg.relative_std * std) * draw.to(param.device))
                             .to(param.dtype))
            stds[name] = std
    except Exception:
        handle.undo()
        raise
    handle.record = {"seed": seed, "relative_std": cfg.relative_std, "matrices": len(stds),
                     "num_weights": int(sum(i.numel() for _, i, _ in handle._saved))}
    return handle
