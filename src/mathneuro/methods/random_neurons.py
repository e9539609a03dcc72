"""Random MLP neurons at LAPE's size: in every MLP layer as many neurons as LAPE (same settings)
keeps there, drawn with the point's seed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from mathneuro.methods.lape import LapeConfig
from mathneuro.methods.reference import sizing_config, sizing_counts, sizing_uses_filters
from mathneuro.methods.registry import register_method, spec_of
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import MethodInputs


@dataclass
class RandomNeuronsConfig(LapeConfig):
    name: str = "random_neurons"
    # whose per-layer neuron counts to match: any neuron-level method (lape, a registered one or "pkg.mod:fn");
    # the settings shared with it (share, filter_rate, activation_bar for lape) apply to it
    reference: Optional[str] = None  # None: LAPE, with the settings above
    reference_args: dict[str, Any] = field(default_factory=dict)  # the reference's own other settings

    def validate(self, key: str = "method") -> None:
        super().validate(key)
        sizing_config(self, spec_of(random_neurons_method), key)

    def uses_filters(self) -> bool:
        return sizing_uses_filters(self, spec_of(random_neurons_method))


def random_neuron_selection(widths: Mapping[str, int], counts: Mapping[str, int], seed: int) -> Selection:
    """In every MLP module exactly ``counts[module]`` of its ``widths[module]`` neurons, drawn uniformly
    without replacement (seeded): the random reference of a neuron-level method (LAPE) at its own size."""
    gen = torch.Generator().manual_seed(int(seed))
    unknown = sorted(set(counts) - set(widths))
    if unknown:
        raise ValueError(f"random_neurons: counts for modules without a width: {', '.join(unknown)}")
    neurons = {}
    for module in sorted(widths):
        width, count = int(widths[module]), int(counts.get(module, 0))
        if not 0 <= count <= width:
            raise ValueError(f"random_neurons: count {count} for {module} outside [0, {width}]")
        drawn = torch.randperm(width, generator=gen)[:count]
        neurons[module] = torch.sort(drawn).values.to(torch.int64)
    return Selection(neurons=neurons, method="random_neurons", meta={"seed": int(seed)})


def _sized_by_summary(selection: Selection) -> dict:
    """The sizing method's own metadata in ``results.json``: ``reference_meta``, and ``lape`` where LAPE sized it."""
    out = {"reference_meta": selection.meta.get("reference_meta", {})}
    if "lape" in selection.meta:
        out["lape"] = selection.meta["lape"]
    return out


@register_method("random_neurons", needs=("activation_counts",), config=RandomNeuronsConfig, unit="neurons",
                 point_fields=("share",), sized_by="reference",
                 default_sized_by="lape", summary=_sized_by_summary,
                 empty_hint="lower method.filter_rate or method.activation_bar")
def random_neurons_method(inputs: MethodInputs, cfg: RandomNeuronsConfig) -> Selection:
    """In every MLP layer as many neurons as the reference method (``method.reference``, LAPE with the same
    settings by default) keeps there, drawn with ``seed``: a neuron-level method's size without its choice."""
    # lape warns when saturated
    reference_counts, reference_meta = sizing_counts(inputs, cfg, spec_of(random_neurons_method))
    counts = inputs.task["activation_counts"]
    widths = {m: counts.get(m, "positive").numel() for m in counts.modules()}
    sel = random_neuron_selection(widths, reference_counts, inputs.seed)
    sized_by = spec_of(random_neurons_method).sizing(cfg)
    sel.meta.update(reference=sized_by, reference_meta=dict(reference_meta))
    if sized_by == "lape":
        sel.meta["lape"] = dict(reference_meta)  # under LAPE's name too, where a lape point keeps it
    return sel
