"""A selection is data: which weights (boolean masks) or MLP neurons (indices) a method chose.

It can be saved and loaded (safetensors), summarised (counts per layer and module type),
and compared with another selection (:func:`mathneuro.report.overlap.overlap`). Masks are kept on the CPU.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mathneuro.methods.counts import NEURON_PREFIX, summarize
from mathneuro.util.io import atomic_write

PACKED_SHAPES = "packed_mask_shapes"  # metadata key: {name: shape} of the masks stored as packed bits


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """A mask as bits, 8 to a byte (1-D uint8): a saved selection is an eighth of a byte per weight."""
    return torch.from_numpy(np.packbits(mask.detach().to("cpu", torch.bool).reshape(-1).numpy()))


def unpack_mask(packed: torch.Tensor, shape: list[int] | tuple[int, ...]) -> torch.Tensor:
    """The 0/1 uint8 mask of ``shape`` that :func:`pack_mask` packed."""
    bits = np.unpackbits(packed.numpy(), count=int(np.prod(shape)))  # prod of () is 1
    return torch.from_numpy(bits).reshape(tuple(shape))


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
        return summarize(self, num_scored=num_scored, num_parameters=num_parameters,
                         method=self.method, top_k=self.meta.get("top_k"))

    def save(self, path: str | os.PathLike) -> None:
        """Write ``path`` (safetensors): masks as packed bits (their shapes in the metadata),
        neurons as int64. :class:`SelectionFile` reads masks back as 0/1 uint8 of the weight's shape."""
        tensors = {name: pack_mask(m) for name, m in self.masks.items()}
        tensors.update({NEURON_PREFIX + name: n.to(torch.int64).contiguous() for name, n in self.neurons.items()})
        shapes = {name: list(m.shape) for name, m in self.masks.items()}
        metadata = {"method": self.method, "meta": json.dumps(self.meta, default=str),
                    PACKED_SHAPES: json.dumps(shapes)}
        atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))

    @classmethod
    def load(cls, path: str | os.PathLike) -> Selection:
        """Read a selection written by :meth:`save`."""
        stored = SelectionFile(path)
        masks, neurons = {}, {}
        for name in stored:
            if name.startswith(NEURON_PREFIX):
                neurons[name[len(NEURON_PREFIX):]] = stored[name]
            else:
                masks[name] = stored[name].bool()
        meta = stored.metadata
        return cls(masks, neurons, meta.get("method", ""), json.loads(meta.get("meta", "{}")))


class SelectionFile(Mapping):
    """A ``selection.safetensors`` opened lazily: each tensor is read from disk when asked for.

    Keys are the stored names (``neurons::<module>`` for neuron indices). A mask comes back as 0/1
    uint8 of the weight's shape, whether the file packs masks as bits (written by
    :meth:`Selection.save`) or stores them whole (older files, or other tools). ``metadata`` holds
    the file's string metadata (may be empty), without the packing's own key."""

    names_say_kind = True  # neuron entries are known by their name: counting never loads a tensor to tell

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"selection file not found: {self.path}")
        with safe_open(str(self.path), framework="pt") as handle:
            self._keys = list(handle.keys())
            self.metadata: dict[str, str] = dict(handle.metadata() or {})
        try:
            self._shapes: dict[str, list[int]] = json.loads(self.metadata.pop(PACKED_SHAPES, "{}"))
        except ValueError as exc:
            raise ValueError(f"{self.path}: unreadable {PACKED_SHAPES} metadata ({exc})") from None

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self._keys:
            raise KeyError(key)
        with safe_open(str(self.path), framework="pt") as handle:
            tensor = handle.get_tensor(key)
        shape = self._shapes.get(key)
        return tensor if shape is None else unpack_mask(tensor, shape)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)
