"""Selection methods: cheap functions of cached statistics and the current weights.

- ``mathneuro``: per weight matrix, top-K of the math score minus top-K of each filter's score
  (SPEC §2); several filters combine as a union of their top-K sets.
- ``wanda``: the paper's ablation — top-K of the math score alone, per matrix; ``wanda_row``:
  Wanda proper, |W|·sqrt(Σx²), top-K per output row.
- ``random``: in every matrix exactly as many weights as a reference selection holds there;
  ``random_neurons``: in every MLP layer as many neurons as LAPE keeps there, drawn at random.
- ``lape``: MLP neurons specific to the math task by activation-probability entropy (SPEC §4);
  top_k is a share of all MLP neurons as in the original (``share="all"``), or of the candidate
  neurons (``share="candidates"``, the variant this project used first).

Every method works one matrix at a time, so float32 scores for all parameters never coexist,
and breaks ties by the lower flat index, so equal inputs give bit-identical selections.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from mathneuro.methods.selection import Selection
from mathneuro.statistics.passes import Statistics

#: The built-in methods (each registered by name in :mod:`mathneuro.methods.registry`).
METHODS = ("mathneuro", "wanda", "wanda_row", "random", "lape", "random_neurons")
#: Methods whose size comes from LAPE's rule (method.share, filter_rate, activation_bar).
LAPE_SIZED = ("lape", "random_neurons")


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


LAPE_SHARES = ("all", "candidates")


def _kth_smallest(values: torch.Tensor, rank: int) -> torch.Tensor:
    rank = min(max(rank, 1), values.numel())
    return torch.kthvalue(values, rank).values


def check_lape_share(share: str, key: str = "method.share") -> str:
    """``share`` if it names a LAPE top-K rule (``all`` or ``candidates``), else a ValueError naming ``key``."""
    if share not in LAPE_SHARES:
        raise ValueError(f"{key}: unknown value {share!r}; allowed: {', '.join(LAPE_SHARES)}")
    return share


def lape_keep_count(top_k: float, num_neurons: int, num_candidates: int, share: str = "all") -> int:
    """How many lowest-entropy neurons LAPE keeps at ``top_k``.

    ``share="all"`` (the original, RUCAIBox ``identify.py``): round(top_k · all MLP neurons), Python's
    round (half to even), as the original computes it. ``share="candidates"`` (a variant this
    project used first): floor(top_k · candidates).
    """
    check_lape_share(share)
    if share == "all":
        return int(round(top_k * num_neurons))
    return topk_count(num_candidates, top_k)


def _smallest_top_k_keeping(count: int, num_neurons: int) -> float:
    """The smallest float K with round(K · num_neurons) >= count (Python's round: half to even)."""
    k = (count - 0.5) / num_neurons
    while k > 0 and round(math.nextafter(k, 0) * num_neurons) >= count:
        k = math.nextafter(k, 0)
    while round(k * num_neurons) < count:
        k = math.nextafter(k, math.inf)
    return min(k, 1.0)


def lape_min_top_k(num_neurons: int) -> float:
    """The smallest top-K at which LAPE's original rule keeps at least one neuron: round(K · N) >= 1,
    just above 0.5 / N. Whether a kept neuron is the math task's still depends on the statistics."""
    if num_neurons < 1:
        raise ValueError(f"num_neurons: must be >= 1, got {num_neurons}")
    return _smallest_top_k_keeping(1, num_neurons)


def lape_saturation_top_k(num_neurons: int, num_candidates: int, share: str = "all") -> float | None:
    """The smallest top-K from which LAPE keeps every candidate, so a larger K selects nothing new.

    ``all``: the smallest K with round(K · N) >= candidates; ``candidates``: 1.0. None without candidates.
    """
    check_lape_share(share)
    if num_candidates < 1:
        return None
    if share == "candidates":
        return 1.0
    return _smallest_top_k_keeping(num_candidates, num_neurons)


def lape_selection(
    task: Statistics,
    others: Sequence[Statistics],
    top_k: float,
    filter_rate: float = 0.95,
    activation_bar: float = 0.95,
    share: str = "all",
) -> Selection:
    """The math task's neurons by LAPE (Tang et al. 2024), SPEC §4.

    p[n, t] = share of task t's tokens with activation > 0. Candidates: neurons where some
    task's p exceeds the ``filter_rate`` quantile of all p; the others get entropy +inf. Keep
    the lowest-entropy neurons (ties: lower flat index first): round(``top_k`` · all MLP neurons)
    of them with ``share="all"`` (the original rule), floor(``top_k`` · candidates) with
    ``share="candidates"``. A kept neuron belongs to every task whose p exceeds the
    ``activation_bar`` quantile; kept non-candidates drop out there unless ``activation_bar`` is
    below ``filter_rate`` (as in the original). Returns task 0's (math) neurons.

    ``meta`` says which rule ran and whether it saturated: ``saturated`` is true when every
    candidate is kept, so a larger ``top_k`` selects nothing new (``saturation_top_k``: from where).
    """
    check_fraction(top_k)
    check_lape_share(share)
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
    num_neurons = probs.shape[0]
    num_candidates = int(candidate.sum())
    n_keep = min(lape_keep_count(top_k, num_neurons, num_candidates, share), num_neurons)
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
    saturation = lape_saturation_top_k(num_neurons, num_candidates, share)
    meta = {"top_k": top_k, "share": share, "rule": LAPE_RULES[share],
            "filter_rate": filter_rate, "activation_bar": activation_bar,
            "num_neurons": num_neurons, "num_candidates": num_candidates, "num_kept": int(n_keep),
            "num_kept_candidates": min(int(n_keep), num_candidates),
            "saturated": num_candidates > 0 and n_keep >= num_candidates, "saturation_top_k": saturation}
    return Selection(neurons=neurons, method="lape", meta=meta)


LAPE_RULES = {"all": "round(top_k * all MLP neurons), lowest entropy",
              "candidates": "floor(top_k * candidates), lowest entropy"}


def lape_saturation_message(meta: dict) -> str | None:
    """One line saying that a LAPE selection kept every candidate (a larger top_k adds nothing), else None."""
    if not meta.get("saturated"):
        return None
    return (f"lape: top_k {meta['top_k']} keeps all {meta['num_candidates']:,} candidate neurons "
            f"(share={meta['share']}; saturated from top_k {meta['saturation_top_k']:.6g}): "
            "a larger top_k selects nothing new")
