"""How much selections agree (overlap, Jaccard, per block), data efficiency over sample sizes, and
reading saved selections. Counting one selection is :mod:`mathneuro.methods.counts`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mathneuro.methods.counts import (
    SelectionLike,
    count_entry,
    count_selected,
    entry_index,
    layer_key,
    ratio,
    sort_layer_keys,
)
from mathneuro.methods.selection import SelectionFile


# ------------------------------------------------------------------------------------------ overlap
def _pair_counts(
    name: str, a: tuple[torch.Tensor, bool] | None, b: tuple[torch.Tensor, bool] | None
) -> tuple[int, int, int]:
    """(|A|, |B|, |A∩B|) for one entry given ``(tensor, is_neuron)`` per side; a missing side is empty."""
    if a is None or b is None:
        if a is not None:
            return count_entry(*a), 0, 0
        return 0, count_entry(*b), 0
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
        "jaccard": ratio(inter, union),
        "a_in_b": ratio(inter, size_a),
        "b_in_a": ratio(inter, size_b),
    }


def overlap(a: SelectionLike, b: SelectionLike, *, per_layer: bool = False) -> dict:
    """How much two selections agree: sizes, |A∩B|, |A∪B|, Jaccard, share of A in B and of B in A.

    Names present on one side only count as empty on the other. Ratios with a zero denominator
    (both selections empty) are None. With ``per_layer=True`` the same numbers per decoder block
    are added under ``"per_layer"``."""
    index_a, index_b = entry_index(a), entry_index(b)
    size_a = size_b = inter = 0
    layers: dict[str, list[int]] = {}
    for name in sorted(set(index_a) | set(index_b)):
        ea = (index_a[name][0][index_a[name][1]], index_a[name][2]) if name in index_a else None
        eb = (index_b[name][0][index_b[name][1]], index_b[name][2]) if name in index_b else None
        sa, sb, si = _pair_counts(name, ea, eb)
        del ea, eb
        size_a, size_b, inter = size_a + sa, size_b + sb, inter + si
        if per_layer:
            acc = layers.setdefault(layer_key(name), [0, 0, 0])
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


class _PairOverlaps:
    """The overlap of two of ``selections`` by key, each unordered pair computed once."""

    def __init__(self, selections: Mapping[tuple[int, Any], SelectionLike]) -> None:
        self.selections = selections
        self._cache: dict[frozenset, dict] = {}

    def pair(self, ka: tuple, kb: tuple) -> tuple[dict, bool]:
        """The overlap of ``ka`` and ``kb``, and whether its ``a`` is ``ka`` (else it is ``kb``)."""
        key = frozenset((ka, kb))
        if key not in self._cache:
            self._cache[key] = {"first": ka, **overlap(self.selections[ka], self.selections[kb])}
        o = self._cache[key]
        return o, o["first"] == ka

    def within(self, n: int, seeds: list[Any]) -> tuple[list[float], list[float]]:
        """Jaccards and containments (both directions) over every pair of ``seeds`` at ``n`` samples."""
        jac, inb = [], []
        for i in range(len(seeds)):
            for j in range(i + 1, len(seeds)):
                o, _ = self.pair((n, seeds[i]), (n, seeds[j]))
                if o["jaccard"] is not None:
                    jac.append(o["jaccard"])
                inb.extend(v for v in (o["a_in_b"], o["b_in_a"]) if v is not None)
        return jac, inb

    def against(self, n: int, seeds: list[Any], ref: int,
                ref_seeds: list[Any]) -> tuple[list[float], list[float], list[float]]:
        """Share of the reference in N, of N in the reference, and the Jaccard, over every (N, s) x (ref, s')
        pair other than a selection with itself."""
        ref_in_n, n_in_ref, ref_jac = [], [], []
        for s in seeds:
            for s_ref in ref_seeds:
                if (n, s) == (ref, s_ref):
                    continue
                o, forward = self.pair((n, s), (ref, s_ref))
                a_in_b, b_in_a = (o["a_in_b"], o["b_in_a"]) if forward else (o["b_in_a"], o["a_in_b"])
                if b_in_a is not None:
                    ref_in_n.append(b_in_a)
                if a_in_b is not None:
                    n_in_ref.append(a_in_b)
                if o["jaccard"] is not None:
                    ref_jac.append(o["jaccard"])
        return ref_in_n, n_in_ref, ref_jac


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
    overlaps = _PairOverlaps(selections)
    rows = []
    for n in sorted(by_n):
        seeds = by_n[n]
        jac, inb = overlaps.within(n, seeds)
        ref_in_n, n_in_ref, ref_jac = overlaps.against(n, seeds, ref, by_n[ref])
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
