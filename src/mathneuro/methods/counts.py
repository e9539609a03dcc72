"""Counting a selection: how many weights or neurons, where they sit (per decoder block, per module
type), and the ``selection`` summary of ``results.json``.

A selection is either a mapping of weight masks (parameter name -> bool tensor of the weight's
shape) or of neuron indices (activation-module name -> int64 indices, LAPE), or any object with
``.masks`` / ``.neurons`` attributes such as :class:`~mathneuro.methods.selection.Selection`. Every function
here walks one tensor at a time, so selections of 8B models never need to be concatenated.

Internally neuron selections are keyed ``neurons::<module>`` (the on-disk naming of
``selection.safetensors``), so weight masks and neuron indices never collide.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import torch

NEURON_PREFIX = "neurons::"  # how neuron entries are named in selection files and in counting
OTHER = "other"

_LAYER_RE = re.compile(r"(?:^|\.)(?:layers|h|blocks)\.(\d+)(?:\.|$)")
_SUFFIXES = ("weight", "bias")

SelectionLike = Any  # Mapping[str, Tensor] or an object with .masks / .neurons


# --------------------------------------------------------------------------------------------- names
def layer_index(name: str) -> int | None:
    """The decoder block index in ``name`` (``.layers.N.``, ``.h.N.``, ``.blocks.N.``), else None."""
    if name.startswith(NEURON_PREFIX):
        name = name[len(NEURON_PREFIX) :]
    match = _LAYER_RE.search(name)
    return int(match.group(1)) if match else None


def module_type(name: str) -> str:
    """The short name of the module that owns ``name``: ``q_proj``, ``down_proj``, ``fc1``, ``act_fn``…"""
    if name.startswith(NEURON_PREFIX):
        name = name[len(NEURON_PREFIX) :]
    parts = name.split(".")
    if len(parts) > 1 and parts[-1] in _SUFFIXES:
        parts = parts[:-1]
    return parts[-1]


def layer_key(name: str) -> str:
    index = layer_index(name)
    return OTHER if index is None else str(index)


def _layer_sort_key(key: str) -> tuple[int, int, str]:
    return (0, int(key), "") if key.isdigit() else (1, 0, key)


def sort_layer_keys(keys: Any) -> list[str]:
    """Block indices sorted numerically, non-numeric keys (``other``) last."""
    return sorted(keys, key=_layer_sort_key)


# ------------------------------------------------------------------------------------ normalisation
def _holds_indices(tensor: torch.Tensor) -> bool:
    """Integer tensors other than bool/uint8 hold neuron indices; bool/uint8 (0/1) are masks."""
    return tensor.dtype not in (torch.bool, torch.uint8) and not tensor.is_floating_point()


def entry_index(selection: SelectionLike) -> dict[str, tuple[Mapping[str, torch.Tensor], str, bool]]:
    """canonical key -> (mapping, key in it, is_neuron), without keeping any tensor alive.

    Neuron entries get the canonical key ``neurons::<module>``. In a raw mapping an entry is a
    neuron entry when its name has that prefix or (in memory only) its dtype holds indices."""
    out: dict[str, tuple[Mapping[str, torch.Tensor], str, bool]] = {}
    if isinstance(selection, Mapping):
        by_name = bool(getattr(selection, "names_say_kind", False))  # a lazy file: never load to tell
        for name in selection:
            neuron = name.startswith(NEURON_PREFIX) or (not by_name and _holds_indices(selection[name]))
            key = NEURON_PREFIX + name if neuron and not name.startswith(NEURON_PREFIX) else name
            out[key] = (selection, name, neuron)
        return out
    masks = getattr(selection, "masks", None)
    neurons = getattr(selection, "neurons", None)
    if masks is None and neurons is None:
        raise TypeError(
            "selection: expected a mapping of tensors or an object with .masks/.neurons, "
            f"got {type(selection).__name__}"
        )
    for name in masks or {}:
        out[name] = (masks, name, False)
    for name in neurons or {}:
        key = name if name.startswith(NEURON_PREFIX) else NEURON_PREFIX + name
        out[key] = (neurons, name, True)
    return out


def _entries(selection: SelectionLike) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """Yield ``(canonical key, tensor, is_neuron)`` lazily, one entry at a time."""
    for key, (mapping, name, neuron) in entry_index(selection).items():
        yield key, mapping[name], neuron


def count_entry(tensor: torch.Tensor, neuron: bool) -> int:
    if neuron:
        return int(torch.unique(tensor.reshape(-1)).numel())
    if tensor.dtype == torch.bool:
        return int(tensor.count_nonzero())
    return int((tensor != 0).count_nonzero())


# ----------------------------------------------------------------------------------------- counting
def count_selected(masks: SelectionLike, *, kind: str | None = None) -> int:
    """Number of selected weights (mask entries set) plus selected neurons (unique indices);
    ``kind="weights"`` or ``"neurons"`` counts only one of the two."""
    if kind not in (None, "weights", "neurons"):
        raise ValueError(f"kind: expected None, 'weights' or 'neurons', got {kind!r}")
    return sum(
        count_entry(t, neuron)
        for _, t, neuron in _entries(masks)
        if kind is None or neuron == (kind == "neurons")
    )


def count_entries(masks: SelectionLike) -> int:
    """Total number of mask entries (selected or not); equals the scored weights when the selection
    stores one mask per scored matrix. Neuron entries are not counted."""
    return sum(t.numel() for _, t, neuron in _entries(masks) if not neuron)


def per_layer_counts(masks: SelectionLike) -> dict[str, int]:
    """Selected count per decoder block (keys ``"0"``, ``"1"``…, sorted numerically; ``"other"`` last)."""
    counts: dict[str, int] = {}
    for key, tensor, neuron in _entries(masks):
        layer = layer_key(key)
        counts[layer] = counts.get(layer, 0) + count_entry(tensor, neuron)
    return {k: counts[k] for k in sort_layer_keys(counts)}


def per_module_counts(masks: SelectionLike) -> dict[str, int]:
    """Selected count per module type (``q_proj``, ``gate_proj``, ``fc1``, ``act_fn``…), sorted by name."""
    counts: dict[str, int] = {}
    for key, tensor, neuron in _entries(masks):
        kind = module_type(key)
        counts[kind] = counts.get(kind, 0) + count_entry(tensor, neuron)
    return dict(sorted(counts.items()))


def ratio(num: float, den: float | None) -> float | None:
    return None if not den else num / den


def summarize(
    masks: SelectionLike,
    *,
    num_scored: int | None,
    num_parameters: int | None,
    method: str = "",
    top_k: float | None = None,
) -> dict:
    """The ``selection`` object of results.json: counts, fractions of model/scored, spread over blocks.

    ``method``/``top_k`` default to the selection's ``.method`` / ``.meta["top_k"]`` when it has them.
    Fractions are None when their denominator is unknown or zero."""
    if not method:
        method = str(getattr(masks, "method", "") or "")
    if top_k is None:
        meta = getattr(masks, "meta", None)
        if isinstance(meta, Mapping) and meta.get("top_k") is not None:
            top_k = float(meta["top_k"])
    per_layer = per_layer_counts(masks)
    num_selected = sum(per_layer.values())
    return {
        "method": method,
        "top_k": top_k,
        "num_selected": num_selected,
        "num_scored": num_scored,
        "num_parameters": num_parameters,
        "fraction_of_model": ratio(num_selected, num_parameters),
        "fraction_of_scored": ratio(num_selected, num_scored),
        "per_layer": per_layer,
        "per_module": per_module_counts(masks),
    }
