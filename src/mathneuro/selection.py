"""A selection is data: which weights (boolean masks) or MLP neurons (indices) a method chose.

It can be saved and loaded (safetensors), summarised (counts per layer and module type),
and compared with another selection (overlap). Masks are kept on the CPU.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mathneuro.recording import atomic_write

NEURON_PREFIX = "neurons::"


@dataclass
class Selection:
    """Per parameter name a bool mask of the weight's shape; per activation module the neuron indices."""

    masks: dict[str, torch.Tensor] = field(default_factory=dict)
    neurons: dict[str, torch.Tensor] = field(default_factory=dict)
    method: str = ""
    meta: dict = field(default_factory=dict)

    def num_selected(self) -> int:
        """Total selected weights plus selected neurons."""
        return sum(int(m.sum()) for m in self.masks.values()) + sum(int(n.numel()) for n in self.neurons.values())

    def counts(self) -> dict[str, int]:
        """Selected entries per parameter (or activation module) name."""
        out = {name: int(m.sum()) for name, m in self.masks.items()}
        out.update({name: int(n.numel()) for name, n in self.neurons.items()})
        return out

    def summary(self, num_scored: int | None = None, num_parameters: int | None = None) -> dict:
        """The ``selection`` block of results.json: counts, fractions, per layer and per module type."""
        from mathneuro.analysis import summarize

        return summarize(self, num_scored=num_scored, num_parameters=num_parameters,
                         method=self.method, top_k=self.meta.get("top_k"))

    def overlap(self, other: Selection) -> dict:
        """Jaccard and containment between this selection and ``other``."""
        from mathneuro.analysis import overlap

        return overlap(self, other)

    def save(self, path: str | os.PathLike) -> None:
        """Write ``path`` (safetensors): masks as 0/1 uint8 of the weight's shape, neurons as int64."""
        tensors = {name: m.to(torch.uint8).contiguous() for name, m in self.masks.items()}
        tensors.update({NEURON_PREFIX + name: n.to(torch.int64).contiguous() for name, n in self.neurons.items()})
        metadata = {"method": self.method, "meta": json.dumps(self.meta, default=str)}
        atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Selection:
        """Read a selection written by :meth:`save`."""
        masks, neurons = {}, {}
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            for name in f.keys():
                tensor = f.get_tensor(name)
                if name.startswith(NEURON_PREFIX):
                    neurons[name[len(NEURON_PREFIX):]] = tensor
                else:
                    masks[name] = tensor.bool()
        return cls(masks, neurons, metadata.get("method", ""), json.loads(metadata.get("meta", "{}")))
