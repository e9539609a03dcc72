"""LAPE (Tang et al. 2024): MLP neurons specific to the task by activation-probability entropy
(docs/method.md)."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mathneuro.methods.registry import register_method
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import MethodConfig, MethodInputs
from mathneuro.methods.topk import check_fraction, topk_count
from mathneuro.statistics.passes import Statistics

log = logging.getLogger("mathneuro")


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
    """The math task's neurons by LAPE (Tang et al. 2024), docs/method.md#4-baselines.

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


@dataclass
class LapeConfig(MethodConfig):
    name: str = "lape"
    filter_rate: float = 0.95
    activation_bar: float = 0.95
    share: str = "all"  # top_k is a share of all MLP neurons (the original) or of the candidates

    def validate(self, key: str = "method") -> None:
        check_lape_share(self.share, f"{key}.share")
        for name in ("filter_rate", "activation_bar"):
            value = getattr(self, name)
            if not 0 < value < 1:
                raise ValueError(f"{key}.{name}: must be in (0, 1), got {value!r}")

@register_method("lape", needs=("activation_counts",), config=LapeConfig, unit="neurons", point_fields=("share",),
                 summary=lambda sel: {"lape": dict(sel.meta)},
                 empty_hint="lower method.filter_rate or method.activation_bar")
def lape_method(inputs: MethodInputs, cfg: LapeConfig) -> Selection:
    """Math-specific MLP neurons by activation-probability entropy (LAPE)."""
    sel = lape_selection(inputs.task["activation_counts"], inputs.filter_stats("activation_counts"), inputs.top_k,
                         filter_rate=cfg.filter_rate, activation_bar=cfg.activation_bar, share=cfg.share)
    message = lape_saturation_message(sel.meta)
    if message:
        log.warning(message)
    return sel
