"""Claim 5's records: the overlap of two draws' selections as per-matrix counts, committed and re-readable.

Claim 5 (ANALYSIS_PLAN.md §5.5) is the share of one draw's M found in another's, averaged over both
directions and over pairs of draws, at N = 1, 10, 100. The selections themselves (tens of millions of mask
entries) are not committed; their counts are: one record per pair of draws and set, kind ``overlap``:

- header ``{"kind": "overlap", "study", "name", "point": {model, task, filter, top_k, method, num_samples},
  "set": "M" | "topk", "a": {seed, hash, size, source[, hardware, sha256]}, "b": {...}, "totals": {size_a, size_b,
  intersection}}``; ``hash``: :func:`selection_hash` of the selection, so that every record of one draw can be
  seen to count the same selection;
- one line per weight matrix (or neuron entry): ``{"matrix", "size_a", "size_b", "intersection"}``.

:func:`write_overlap_record` writes one from two selections (saved ``selection.safetensors`` files, or sets
recomputed from cached statistics: ``experiments/claims/overlap_record.py``); :func:`overlap_shares` rebuilds claim 5's
numbers from the records, checking that each record's totals are the sums of its lines and that a draw has one
selection (one hash) at each N.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from claimslib.records import SUFFIX, Packed, write_packed
from mathneuro.methods.counts import SelectionLike, entry_index
from mathneuro.report.overlap import load_selection_file

SETS = ("M", "topk")  # M, the set the method edits; the math top-K set (secondary)
POINT_FIELDS = ("model", "task", "filter", "top_k", "method", "num_samples")  # one claim-5 point: pairs share them
SET_FILES = {"M": "selection.safetensors", "topk": "selection_topk.safetensors"}


def _entries(selection: SelectionLike) -> dict[str, tuple[torch.Tensor, bool]]:
    return {name: (where[key], neuron) for name, (where, key, neuron) in entry_index(selection).items()}


def _as_set(tensor: torch.Tensor, neuron: bool) -> torch.Tensor:
    if neuron:
        return torch.unique(tensor.reshape(-1).to(torch.int64))
    return (tensor if tensor.dtype == torch.bool else tensor != 0).reshape(-1)


def selection_hash(selection: SelectionLike) -> str:
    """SHA-256 (first 16 hex digits) of a selection's content: each entry's name and its selected positions
    (a weight mask's bits, packed; a neuron entry's sorted unique indices), entries in name order. Equal for
    the same selection however it is stored (bool or 0/1 masks, lazy file or in memory)."""
    digest = hashlib.sha256()
    for name, (tensor, neuron) in sorted(_entries(selection).items()):
        values = _as_set(tensor, neuron).cpu().numpy()
        digest.update(name.encode() + (b"\x01" if neuron else b"\x00"))
        digest.update(values.astype(np.int64).tobytes() if neuron else np.packbits(values.astype(bool)).tobytes())
        digest.update(str(values.size).encode() + b"\n")
    return digest.hexdigest()[:16]


def matrix_counts(a: SelectionLike, b: SelectionLike) -> list[dict]:
    """``[{matrix, size_a, size_b, intersection}]`` per entry of either selection (a missing side is empty)."""
    ea, eb = _entries(a), _entries(b)
    rows = []
    for name in sorted(set(ea) | set(eb)):
        sa = _as_set(*ea[name]) if name in ea else None
        sb = _as_set(*eb[name]) if name in eb else None
        neuron = (ea.get(name) or eb.get(name))[1]
        if sa is not None and sb is not None and not neuron and sa.shape != sb.shape:
            raise ValueError(f"overlap: {name!r} has {sa.numel()} entries in A but {sb.numel()} in B")
        size = [0 if s is None else int(s.numel() if neuron else s.count_nonzero()) for s in (sa, sb)]
        if sa is None or sb is None:
            inter = 0
        else:
            inter = int(torch.isin(sa, sb).count_nonzero()) if neuron else int((sa & sb).count_nonzero())
        rows.append({"matrix": name, "size_a": size[0], "size_b": size[1], "intersection": inter})
    return rows


def record_name(point: Mapping[str, Any], set_name: str, seed_a: Any, seed_b: Any) -> str:
    return (f"overlap__{set_name}__{point.get('filter')}__k{point.get('top_k')}__n{point.get('num_samples')}"
            f"__seed{seed_a}-seed{seed_b}")


def write_overlap_record(out_dir: str | Path, point: Mapping[str, Any], set_name: str,
                         a: tuple[Mapping[str, Any], SelectionLike], b: tuple[Mapping[str, Any], SelectionLike],
                         *, study: str = "data_efficiency") -> Path:
    """Write the ``overlap`` record of two draws' selections (``(draw info, selection)`` each; the info holds
    at least ``seed``, and ``source`` / ``hardware`` where known) of one point (model, task, filter, top_k,
    method, num_samples) into ``out_dir``."""
    if set_name not in SETS:
        raise ValueError(f"set: {set_name!r} is not one of {', '.join(SETS)}")
    (info_a, sel_a), (info_b, sel_b) = a, b
    if str(info_a.get("seed")) == str(info_b.get("seed")):
        raise ValueError(f"overlap record: both selections are draw {info_a.get('seed')}; a pair needs two draws")
    rows = matrix_counts(sel_a, sel_b)
    totals = {k: sum(r[k] for r in rows) for k in ("size_a", "size_b", "intersection")}
    name = record_name(point, set_name, info_a.get("seed"), info_b.get("seed"))
    header = {"kind": "overlap", "study": study, "name": name, "point": dict(point), "set": set_name,
              "a": {**info_a, "hash": selection_hash(sel_a), "size": totals["size_a"]},
              "b": {**info_b, "hash": selection_hash(sel_b), "size": totals["size_b"]}, "totals": totals}
    return write_packed(Path(out_dir) / f"{name}{SUFFIX}", header, rows)


def overlap_shares(records: Sequence[Packed], select: Mapping[str, Any]) -> dict[tuple[int, str], dict]:
    """``{(num_samples, set): {"share", "pairs", "draws"}}`` from the ``overlap`` records whose point has
    every ``select`` field: the share of one draw's set in the other's, averaged over both directions and
    over pairs (``a_in_b_mean`` of the aggregated table). Raises ValueError naming a record whose totals are
    not its lines' sums, or a draw counted with two different selections at one N."""
    shares: dict[tuple[int, str], list[float]] = {}
    draws: dict[tuple[int, str], dict[str, str]] = {}
    pairs: dict[tuple[int, str], int] = {}
    for packed in records:
        point = packed.point
        if packed.kind != "overlap" or any(str(point.get(k)) != str(v) for k, v in select.items()):
            continue
        key = (int(point["num_samples"]), str(packed.header.get("set")))
        sums = {k: sum(int(r[k]) for r in packed.rows) for k in ("size_a", "size_b", "intersection")}
        if sums != packed.header.get("totals"):
            raise ValueError(f"overlap record {packed.name}: its totals {packed.header.get('totals')} are not "
                             f"the sums of its per-matrix lines {sums}")
        for side in ("a", "b"):
            info = packed.header[side]
            seen = draws.setdefault(key, {}).setdefault(str(info["seed"]), info["hash"])
            if seen != info["hash"]:
                raise ValueError(f"overlap records at N = {key[0]} ({key[1]}): draw {info['seed']} is counted with "
                                 f"two different selections (hashes {seen} and {info['hash']})")
        pairs[key] = pairs.get(key, 0) + 1
        for inside, whole in (("size_a", "intersection"), ("size_b", "intersection")):
            if sums[inside]:
                shares.setdefault(key, []).append(sums[whole] / sums[inside])
    return {key: {"share": float(np.mean(v)), "pairs": pairs[key], "draws": len(draws[key])}
            for key, v in shares.items()}


def saved_sets(result: Mapping[str, Any]) -> dict[str, SelectionLike]:
    """A finished run's saved sets (``_dir``: its folder): ``{"M": ..., "topk": ...}``, those on disk."""
    folder = Path(str(result["_dir"]))
    return {name: load_selection_file(folder / f) for name, f in SET_FILES.items() if (folder / f).is_file()}


def _file_hashes(result: Mapping[str, Any]) -> dict:
    """``{"sha256": {set: the saved file's sha256}}`` of a run's saved sets (empty where none is on disk)."""
    folder = Path(str(result.get("_dir")))
    found = {name: hashlib.sha256((folder / f).read_bytes()).hexdigest() for name, f in SET_FILES.items()
             if (folder / f).is_file()}
    return {"sha256": found} if found else {}


def write_pairs(results: Sequence[Mapping[str, Any]], out_dir: str | Path,
                sets_of: Callable[[Mapping[str, Any]], Mapping[str, SelectionLike]] = saved_sets) -> list[Path]:
    """Every pair of finished runs (``results.json`` dicts with ``_dir``) of one point (:data:`POINT_FIELDS`)
    with different seeds: one ``overlap`` record per set both have, into ``out_dir`` (each draw's info: seed,
    run folder, hardware, and the sha256 of each saved selection file)."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for r in results:
        point = r.get("point") or {}
        groups.setdefault(tuple(str(point.get(f)) for f in POINT_FIELDS), []).append(r)
    written = []
    for runs in groups.values():
        runs = sorted(runs, key=lambda r: int((r.get("point") or {}).get("seed") or 0))
        sets = [sets_of(r) for r in runs]
        for (i, a), (j, b) in itertools.combinations(enumerate(runs), 2):
            if str(a["point"].get("seed")) == str(b["point"].get("seed")):
                continue
            info = [{"seed": r["point"].get("seed"), "source": Path(str(r["_dir"])).name,
                     **({"hardware": r["hardware"]} if r.get("hardware") else {}), **_file_hashes(r)} for r in (a, b)]
            point = {f: a["point"].get(f) for f in POINT_FIELDS}
            for name in SETS:
                if name in sets[i] and name in sets[j]:
                    written.append(write_overlap_record(out_dir, point, name, (info[0], sets[i][name]),
                                                        (info[1], sets[j][name])))
    return written
