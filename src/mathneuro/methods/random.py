"""Random weights at a reference method's size: in every matrix as many weights as the reference
(MathNeuro by default, ``method.reference``) selects there, drawn with the point's seed."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from mathneuro.methods.mathneuro import MathNeuroConfig
from mathneuro.methods.reference import sizing_config, sizing_counts, sizing_methods, sizing_uses_filters
from mathneuro.methods.registry import register_method, spec_of
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import MethodInputs, MethodSpec

#: Whose per-matrix counts ``random`` matches unless ``method.reference`` names another method; a
#: ``random`` point sized by another method carries ``point.reference``.
DEFAULT_REFERENCE = "mathneuro"


@dataclass
class RandomConfig(MathNeuroConfig):
    name: str = "random"
    # whose per-matrix counts to match: any weight-level method scoring linears (mathneuro, wanda, wanda_row,
    # a registered one or "pkg.mod:fn"); the settings shared with it (filter_top_k, targets) apply to it
    reference: Optional[str] = None  # None: MathNeuro (DEFAULT_REFERENCE)
    reference_args: dict[str, Any] = field(default_factory=dict)  # the reference's own other settings

    def validate(self, key: str = "method") -> None:
        super().validate(key)
        sizing_config(self, spec_of(random_method), key)

    def uses_filters(self) -> bool:
        return sizing_uses_filters(self, spec_of(random_method))


def random_selection(
    shapes: Mapping[str, torch.Size | Sequence[int]], counts: Mapping[str, int], seed: int
) -> Selection:
    """In every matrix exactly ``counts[name]`` entries drawn uniformly without replacement (seeded)."""
    gen = torch.Generator().manual_seed(int(seed))
    masks = {}
    for name in sorted(shapes):
        shape = torch.Size(shapes[name])
        numel = shape.numel()
        count = int(counts.get(name, 0))
        if not 0 <= count <= numel:
            raise ValueError(f"random: count {count} for {name} outside [0, {numel}]")
        flat = torch.zeros(numel, dtype=torch.bool)
        if count:
            flat[torch.randperm(numel, generator=gen)[:count]] = True
        masks[name] = flat.view(shape)
    return Selection(masks, method="random", meta={"seed": int(seed)})


@register_method("random", needs=("linear_inputs",), config=RandomConfig, topk_per_matrix=True,
                 sized_by="reference", default_sized_by=DEFAULT_REFERENCE, compared_with_every_method=True,
                 empty_hint="or a smaller method.filter_top_k")
def random_method(inputs: MethodInputs, cfg: RandomConfig) -> Selection:
    """In every matrix as many weights as the reference method (``method.reference``) selects there,
    drawn with ``seed``: the reference's per-matrix size without its choice of weights."""
    reference_counts, reference_meta = sizing_counts(inputs, cfg, spec_of(random_method))
    shapes = {n: w.shape for n, w in inputs.weights.items()}
    sel = random_selection(shapes, reference_counts, inputs.seed)
    sel.meta.update(top_k=inputs.top_k, reference=spec_of(random_method).sizing(cfg))
    return sel


def weight_level_references() -> list[str]:
    """Registered methods ``random`` can be sized by: weight-level ones scoring linears alone."""
    return sizing_methods("weights", spec_of(random_method).needs)


def reference_config(cfg: RandomConfig, key: str = "method") -> tuple[MethodSpec, Any]:
    """The method sizing ``cfg`` and its validated config (:func:`mathneuro.methods.reference.sizing_config`)."""
    return sizing_config(cfg, spec_of(random_method), key)
