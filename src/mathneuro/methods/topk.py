"""Top-K helpers every weight-level method shares: a checked fraction, floor(K · numel), the mask of the K
largest scores (ties to the lower flat index, so equal inputs give bit-identical selections), and the
score |W| · column statistic computed one matrix at a time in float32."""

from __future__ import annotations

import math

import torch


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
