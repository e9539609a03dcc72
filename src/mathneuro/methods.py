"""Selection methods: cheap functions of cached statistics and the current weights.

- ``mathneuro``: per weight matrix, top-K of the math score minus top-K of each filter's score
  (SPEC §2); several filters combine as a union of their top-K sets.
- ``wanda``: the paper's ablation — top-K of the math score alone, per matrix; ``wanda_row``:
  Wanda proper, |W|·sqrt(Σx²), top-K per output row.
- ``random``: in every matrix exactly as many weights as a reference selection holds there.
- ``lape``: MLP neurons specific to the math task by activation-probability entropy (SPEC §4).

Every method works one matrix at a time, so float32 scores for all parameters never coexist,
and breaks ties by the lower flat index, so equal inputs give bit-identical selections.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from mathneuro.selection import Selection
from mathneuro.statistics import Statistics

METHODS = ("mathneuro", "wanda", "wanda_row", "random", "lape")


def check_fraction(value: float, key: str = "top_k") -> float:
    """``value`` if it is a fraction in (0, 1], else a ValueError naming ``key``."""
    if not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value <= 1:
        raise ValueError(f"{key}: must be a fraction in (0, 1], got {value!r}")
    return float(value)


def topk_count(numel: int, top_k: float) -> int:
    """floor(top_k · numel): how many entries a top-K of a matrix holds."""
    return int(math.floor(top_k * numel + 1e-9))


def topk_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the ``k`` largest entries of ``scores`` (any shape); ties go to the lower flat index."""
    flat = scores.reshape(-1)
    n = flat.numel()
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    if k >= n:
        return torch.ones_like(scores, dtype=torch.bool)
    threshold = torch.kthvalue(flat, n - k + 1).values  # the k-th largest value
    mask = flat > threshold
    need = k - int(mask.sum())
    if need > 0:
        ties = torch.nonzero(flat == threshold).squeeze(1)[:need]
        mask[ties] = True
    return mask.view_as(scores)


def topk_mask_rows(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Bool mask of the ``k`` largest entries of each row; ties go to the lower column index."""
    if k <= 0:
        return torch.zeros_like(scores, dtype=torch.bool)
    if k >= scores.shape[1]:
        return torch.ones_like(scores, dtype=torch.bool)
    # A stable descending sort keeps equal scores in column order, so the first k columns win.
    order = torch.sort(scores, dim=1, descending=True, stable=True).indices[:, :k]
    mask = torch.zeros_like(scores, dtype=torch.bool)
    mask.scatter_(1, order, True)
    return mask


def module_of(param_name: str) -> str:
    """``model.layers.0.mlp.up_proj.weight`` → ``model.layers.0.mlp.up_proj``."""
    return param_name[: -len(".weight")] if param_name.endswith(".weight") else param_name


def weight_scores(weight: torch.Tensor, column_stat: torch.Tensor) -> torch.Tensor:
    """S[i, j] = |W[i, j]| · stat[j] in float32."""
    return weight.detach().abs().to(torch.float32) * column_stat.to(weight.device, torch.float32).unsqueeze(0)


def mathneuro_selection(
    weights: Mapping[str, torch.Tensor],
    task: Statistics,
    filters: Sequence[Statistics],
    top_k: float,
    filter_top_k: float | None = None,
) -> Selection:
    """M = top-K(math score) \\ ∪_f top-K(filter f score), per weight matrix (SPEC §2)."""
    check_fraction(top_k)
    filter_top_k = check_fraction(filter_top_k, "filter_top_k") if filter_top_k is not None else top_k
    if not filters:
        raise ValueError("method=mathneuro needs at least one filter dataset")
    masks = {}
    for name, weight in weights.items():
        module = module_of(name)
        keep = topk_mask(weight_scores(weight, task.get(module, "norm")), topk_count(weight.numel(), top_k))
        k_f = topk_count(weight.numel(), filter_top_k)
        for stats in filters:
            keep &= ~topk_mask(weight_scores(weight, stats.get(module, "norm")), k_f)
        masks[name] = keep.cpu()
    return Selection(masks, method="mathneuro", meta={"top_k": top_k, "filter_top_k": filter_top_k})


def wanda_selection(
    weights: Mapping[str, torch.Tensor], task: Statistics, top_k: float, per_row: bool = False
) -> Selection:
    """Top-K of the task score alone. ``per_row=False``: the paper's Wanda ablation (MathNeuro's
    score, per matrix). ``per_row=True``: Wanda proper, |W|·sqrt(Σx²) compared within each output row."""
    check_fraction(top_k)
    masks = {}
    for name, weight in weights.items():
        module = module_of(name)
        if per_row:
            scores = weight_scores(weight, task.get(module, "sq").sqrt())
            masks[name] = topk_mask_rows(scores, topk_count(weight.shape[1], top_k)).cpu()
        else:
            scores = weight_scores(weight, task.get(module, "norm"))
            masks[name] = topk_mask(scores, topk_count(weight.numel(), top_k)).cpu()
    method = "wanda_row" if per_row else "wanda"
    return Selection(masks, method=method, meta={"top_k": top_k})


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


def _kth_smallest(values: torch.Tensor, rank: int) -> torch.Tensor:
    rank = min(max(rank, 1), values.numel())
    return torch.kthvalue(values, rank).values


def lape_selection(
    task: Statistics,
    others: Sequence[Statistics],
    top_k: float,
    filter_rate: float = 0.95,
    activation_bar: float = 0.95,
) -> Selection:
    """The math task's neurons by LAPE (Tang et al. 2024), SPEC §4.

    p[n, t] = share of task t's tokens with activation > 0. Candidates: neurons where some
    task's p exceeds the ``filter_rate`` quantile of all p. Keep the ``top_k`` fraction of
    candidates with the lowest entropy of p normalised over tasks; a kept neuron belongs to
    every task whose p exceeds the ``activation_bar`` quantile. Returns task 0's (math) neurons.
    """
    check_fraction(top_k)
    if not others:
        raise ValueError("method=lape needs at least one filter dataset to contrast with")
    tasks = [task, *others]
    modules = task.modules()
    sizes = [task.get(m, "positive").numel() for m in modules]
    probs = torch.stack(
        [torch.cat([t.get(m, "positive").to(torch.float64) for m in modules]) / max(t.num_tokens, 1) for t in tasks],
        dim=1,
    )  # [neurons, tasks]
    normed = probs / probs.sum(dim=1, keepdim=True)
    normed = torch.nan_to_num(normed, nan=0.0)
    entropy = -(normed * torch.log(normed.clamp_min(1e-300))).sum(dim=1)
    flat = probs.reshape(-1)
    candidate = (probs > _kth_smallest(flat, round(flat.numel() * filter_rate))).any(dim=1)
    num_candidates = int(candidate.sum())
    n_keep = topk_count(num_candidates, top_k)
    entropy = torch.where(candidate, entropy, torch.full_like(entropy, math.inf))
    kept = torch.sort(entropy, stable=True).indices[:n_keep]
    bar = _kth_smallest(flat, round(flat.numel() * activation_bar))
    mine = kept[probs[kept, 0] > bar]
    mine = torch.sort(mine).values
    neurons = {}
    offset = 0
    for module, size in zip(modules, sizes, strict=True):
        local = mine[(mine >= offset) & (mine < offset + size)] - offset
        neurons[module] = local.to(torch.int64)
        offset += size
    meta = {"top_k": top_k, "filter_rate": filter_rate, "activation_bar": activation_bar,
            "num_candidates": num_candidates, "num_kept": int(n_keep)}
    return Selection(neurons=neurons, method="lape", meta=meta)
