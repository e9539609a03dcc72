"""Analyses of selections: how many weights, where they sit, and how much two selections agree.

A selection is either a mapping of weight masks (parameter name -> bool tensor of the weight's
shape) or of neuron indices (activation-module name -> int64 indices, LAPE), or any object with
``.masks`` / ``.neurons`` attributes such as :class:`mathneuro.methods.selection.Selection`.  Every function
here walks one tensor at a time, so selections of 8B models never need to be concatenated.

Internally neuron selections are keyed ``neurons::<module>`` (the on-disk naming of
``selection.safetensors``), so weight masks and neuron indices never collide.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mathneuro.methods.selection import NEURON_PREFIX, SelectionFile

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


def _layer_key(name: str) -> str:
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


def _index(selection: SelectionLike) -> dict[str, tuple[Mapping[str, torch.Tensor], str, bool]]:
    """canonical key -> (mapping, key in it, is_neuron), without keeping any tensor alive.

    Neuron entries get the canonical key ``neurons::<module>``. In a raw mapping an entry is a
    neuron entry when its name has that prefix or (in memory only) its dtype holds indices."""
    out: dict[str, tuple[Mapping[str, torch.Tensor], str, bool]] = {}
    if isinstance(selection, Mapping):
        by_name = isinstance(selection, SelectionFile)
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
    for key, (mapping, name, neuron) in _index(selection).items():
        yield key, mapping[name], neuron


def _count_entry(tensor: torch.Tensor, neuron: bool) -> int:
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
        _count_entry(t, neuron)
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
        layer = _layer_key(key)
        counts[layer] = counts.get(layer, 0) + _count_entry(tensor, neuron)
    return {k: counts[k] for k in sort_layer_keys(counts)}


def per_module_counts(masks: SelectionLike) -> dict[str, int]:
    """Selected count per module type (``q_proj``, ``gate_proj``, ``fc1``, ``act_fn``…), sorted by name."""
    counts: dict[str, int] = {}
    for key, tensor, neuron in _entries(masks):
        kind = module_type(key)
        counts[kind] = counts.get(kind, 0) + _count_entry(tensor, neuron)
    return dict(sorted(counts.items()))


def _ratio(num: float, den: float | None) -> float | None:
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
        "fraction_of_model": _ratio(num_selected, num_parameters),
        "fraction_of_scored": _ratio(num_selected, num_scored),
        "per_layer": per_layer,
        "per_module": per_module_counts(masks),
    }


# ------------------------------------------------------------------------------------------ overlap
def _pair_counts(
    name: str, a: tuple[torch.Tensor, bool] | None, b: tuple[torch.Tensor, bool] | None
) -> tuple[int, int, int]:
    """(|A|, |B|, |A∩B|) for one entry given ``(tensor, is_neuron)`` per side; a missing side is empty."""
    if a is None or b is None:
        if a is not None:
            return _count_entry(*a), 0, 0
        return 0, _count_entry(*b), 0
    (ta, neuron_a), (tb, neuron_b) = a, b
    if neuron_a != neuron_b:
        raise ValueError(f"overlap: {name!r} is a weight mask on one side and neuron indices on the other")
    if neuron_a:
        ua = torch.unique(ta.reshape(-1))
        ub = torch.unique(tb.reshape(-1))
        return int(ua.numel()), int(ub.numel()), int(torch.isin(ua, ub).count_nonzero())
    if ta.shape != tb.shape:
        raise ValueError(f"overlap: {name!r} has shape {tuple(ta.shape)} in A but {tuple(tb.shape)} in B")
    ba = ta if ta.dtype == torch.bool else ta != 0
    bb = tb if tb.dtype == torch.bool else tb != 0
    return int(ba.count_nonzero()), int(bb.count_nonzero()), int((ba & bb).count_nonzero())


def _overlap_numbers(size_a: int, size_b: int, inter: int) -> dict:
    union = size_a + size_b - inter
    return {
        "size_a": size_a,
        "size_b": size_b,
        "intersection": inter,
        "union": union,
        "jaccard": _ratio(inter, union),
        "a_in_b": _ratio(inter, size_a),
        "b_in_a": _ratio(inter, size_b),
    }


def overlap(a: SelectionLike, b: SelectionLike, *, per_layer: bool = False) -> dict:
    """How much two selections agree: sizes, |A∩B|, |A∪B|, Jaccard, share of A in B and of B in A.

    Names present on one side only count as empty on the other. Ratios with a zero denominator
    (both selections empty) are None. With ``per_layer=True`` the same numbers per decoder block
    are added under ``"per_layer"``."""
    index_a, index_b = _index(a), _index(b)
    size_a = size_b = inter = 0
    layers: dict[str, list[int]] = {}
    for name in sorted(set(index_a) | set(index_b)):
        ea = (index_a[name][0][index_a[name][1]], index_a[name][2]) if name in index_a else None
        eb = (index_b[name][0][index_b[name][1]], index_b[name][2]) if name in index_b else None
        sa, sb, si = _pair_counts(name, ea, eb)
        del ea, eb
        size_a, size_b, inter = size_a + sa, size_b + sb, inter + si
        if per_layer:
            acc = layers.setdefault(_layer_key(name), [0, 0, 0])
            acc[0], acc[1], acc[2] = acc[0] + sa, acc[1] + sb, acc[2] + si
    result = _overlap_numbers(size_a, size_b, inter)
    if per_layer:
        result["per_layer"] = {k: _overlap_numbers(*layers[k]) for k in sort_layer_keys(layers)}
    return result


def overlap_matrix(selections: Mapping[str, SelectionLike]) -> dict:
    """Pairwise overlap of many selections.

    Returns ``labels``, ``sizes`` (label -> count) and square matrices (lists of rows, row i and
    column j meaning A = labels[i], B = labels[j]) ``intersection``, ``jaccard`` and ``a_in_b``
    (share of the row's selection inside the column's), plus ``pairs``: the full :func:`overlap`
    dict of every unordered pair, with ``a``/``b`` labels."""
    labels = list(selections)
    n = len(labels)
    sizes = {label: count_selected(selections[label]) for label in labels}
    inter = [[0] * n for _ in range(n)]
    jac: list[list[float | None]] = [[None] * n for _ in range(n)]
    a_in_b: list[list[float | None]] = [[None] * n for _ in range(n)]
    pairs = []
    for i in range(n):
        inter[i][i] = sizes[labels[i]]
        jac[i][i] = 1.0 if sizes[labels[i]] else None
        a_in_b[i][i] = 1.0 if sizes[labels[i]] else None
        for j in range(i + 1, n):
            o = overlap(selections[labels[i]], selections[labels[j]])
            pairs.append({"a": labels[i], "b": labels[j], **o})
            inter[i][j] = inter[j][i] = o["intersection"]
            jac[i][j] = jac[j][i] = o["jaccard"]
            a_in_b[i][j], a_in_b[j][i] = o["a_in_b"], o["b_in_a"]
    return {"labels": labels, "sizes": sizes, "intersection": inter, "jaccard": jac, "a_in_b": a_in_b,
            "pairs": pairs}


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n-1; 0 for one value); ``(None, None)`` for no values."""
    if not values:
        return None, None
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var)


def data_efficiency(
    selections: Mapping[tuple[int, Any], SelectionLike], *, reference_samples: int | None = None,
    topk_selections: Mapping[tuple[int, Any], SelectionLike] | None = None,
) -> list[dict]:
    """The data-efficiency study of :func:`efficiency_rows` for M and, given ``topk_selections``
    (the math top-K sets of the same identifications, keyed alike), for the top-K sets too: their
    numbers are added to each row with the prefix ``topk_`` (``topk_jaccard_mean``,
    ``topk_a_in_b_mean``, ``topk_ref_in_n_mean``, ...). Both matter: the paper's "70-80 % at one
    sample" matches the overlap of the math top-K sets far better than that of M."""
    rows = efficiency_rows(selections, reference_samples=reference_samples)
    if topk_selections:
        top = {r["num_samples"]: r for r in efficiency_rows(topk_selections, reference_samples=reference_samples)}
        for row in rows:
            extra = top.get(row["num_samples"], {})
            row.update({f"topk_{k}": v for k, v in extra.items() if k != "num_samples"})
    return rows


def efficiency_rows(
    selections: Mapping[tuple[int, Any], SelectionLike], *, reference_samples: int | None = None
) -> list[dict]:
    """The paper's data-efficiency study from selections keyed ``(num_samples, seed)``.

    Per sample count N, one row with: ``seeds`` (how many identifications), ``pairs`` and
    ``jaccard_mean/std`` / ``a_in_b_mean`` over every pair of seeds at that N (two independent
    identifications; a_in_b averaged over both directions), and against the reference count
    (default: the largest N) ``ref_in_n_mean`` = share of M(ref) also found with N samples,
    ``n_in_ref_mean`` and ``ref_jaccard_mean``, averaged over all (N, s) x (ref, s') pairs other
    than a selection with itself. Sample std (n-1); None where no pair exists."""
    by_n: dict[int, list[Any]] = {}
    for n, seed in selections:
        by_n.setdefault(int(n), []).append(seed)
    if not by_n:
        return []
    ref = int(reference_samples) if reference_samples is not None else max(by_n)
    if ref not in by_n:
        raise ValueError(f"reference_samples: no selection with {ref} samples; have {sorted(by_n)}")
    cache: dict[frozenset, dict] = {}

    def pair(ka: tuple, kb: tuple) -> tuple[dict, bool]:
        key = frozenset((ka, kb))
        if key not in cache:
            cache[key] = {"first": ka, **overlap(selections[ka], selections[kb])}
        o = cache[key]
        return o, o["first"] == ka

    rows = []
    for n in sorted(by_n):
        seeds = by_n[n]
        jac, inb = [], []
        for i in range(len(seeds)):
            for j in range(i + 1, len(seeds)):
                o, _ = pair((n, seeds[i]), (n, seeds[j]))
                if o["jaccard"] is not None:
                    jac.append(o["jaccard"])
                inb.extend(v for v in (o["a_in_b"], o["b_in_a"]) if v is not None)
        ref_in_n, n_in_ref, ref_jac = [], [], []
        for s in seeds:
            for s_ref in by_n[ref]:
                if (n, s) == (ref, s_ref):
                    continue
                o, forward = pair((n, s), (ref, s_ref))
                a_in_b, b_in_a = (o["a_in_b"], o["b_in_a"]) if forward else (o["b_in_a"], o["a_in_b"])
                if b_in_a is not None:
                    ref_in_n.append(b_in_a)
                if a_in_b is not None:
                    n_in_ref.append(a_in_b)
                if o["jaccard"] is not None:
                    ref_jac.append(o["jaccard"])
        jm, js = mean_std(jac)
        rows.append({
            "num_samples": n,
            "seeds": len(seeds),
            "pairs": len(jac),
            "jaccard_mean": jm,
            "jaccard_std": js,
            "a_in_b_mean": mean_std(inb)[0],
            "ref_num_samples": ref,
            "ref_in_n_mean": mean_std(ref_in_n)[0],
            "n_in_ref_mean": mean_std(n_in_ref)[0],
            "ref_jaccard_mean": mean_std(ref_jac)[0],
        })
    return rows


# ------------------------------------------------------------------------------------- saved files
def load_selection_file(path: str | Path, *, lazy: bool = True) -> Mapping[str, torch.Tensor]:
    """Read a saved selection: weight masks by parameter name plus ``neurons::<module>`` indices.

    ``lazy=True`` returns a :class:`SelectionFile` (one tensor in memory at a time); otherwise a
    dict with every tensor loaded (masks unpacked)."""
    stored = SelectionFile(path)
    return stored if lazy else {name: stored[name] for name in stored}
