"""Grouped-query attention over a KV cache without copying it, for passes of several tokens on CPU.

transformers' SDPA attention expands a grouped-query model's keys and values to every query head
(``repeat_kv``: a copy of the whole cache, per layer and pass) whenever a pass of several tokens
carries an attention mask, as every pass after a shared prefix does (its rows are padded). On CPU
that copy can cost more than the pass's arithmetic: Qwen2.5-Coder-0.5B in float32, 8 rows on a
900-token cache, a pass of 2 tokens per row took 2.7x a decode step with it and 1.3x without
(531 ms and 260 ms against ~200 ms; ``experiments/benchmarks/bench_pass_cost.py`` measures it).
``scaled_dot_product_attention(..., enable_gqa=True)`` reads the grouped heads in place and returns
bitwise the same output (``tests/test_gqa_attention.py``).

:func:`grouped_query_attention` switches a model's SDPA attention to that for the duration of a
block (the prefix-cache evaluation path and the probes' cached generation use it); a model on
another device, with another attention implementation, or without grouped heads is left as it is.
On CUDA a masked ``enable_gqa`` call would leave the fused kernels, so CUDA keeps the copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from transformers import AttentionInterface, PretrainedConfig
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

NAME = "mathneuro_gqa_sdpa"  # the attention implementation's registered name


def gqa_sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except that a masked pass of several queries over grouped key/value
    heads on CPU attends to the grouped heads in place instead of a per-head copy."""
    groups = int(getattr(module, "num_key_value_groups", 1) or 1)
    if (groups > 1 and attention_mask is not None and query.shape[2] > 1 and query.device.type == "cpu"
            and kwargs.get("position_bias") is None and kwargs.get("softcap") is None
            and key.shape[-1] == value.shape[-1]):
        out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask,
                                                               dropout_p=dropout, scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


AttentionInterface.register(NAME, gqa_sdpa_forward)
AttentionMaskInterface.register(NAME, sdpa_mask)


def _sdpa_configs(model: torch.nn.Module) -> list[PretrainedConfig]:
    """The model's configs (its own and its modules', e.g. a text sub-model's) whose attention is SDPA."""
    found: dict[int, PretrainedConfig] = {}
    for module in model.modules():
        config = getattr(module, "config", None)
        if isinstance(config, PretrainedConfig) and getattr(config, "_attn_implementation", None) == "sdpa":
            found[id(config)] = config
    return list(found.values())


@contextlib.contextmanager
def grouped_query_attention(model: torch.nn.Module) -> Iterator[None]:
    """Within the block, ``model``'s SDPA attention attends to grouped key/value heads in place on CPU
    (see the module's docstring); its implementation is restored on exit."""
    try:
        on_cpu = next(model.parameters()).device.type == "cpu"
    except StopIteration:
        on_cpu = False
    configs = _sdpa_configs(model) if on_cpu else []
    for config in configs:
        config._attn_implementation_internal = NAME
    try:
        yield
    finally:
        for config in configs:
            config._attn_implementation_internal = "sdpa"


__all__ = ["NAME", "gqa_sdpa_forward", "grouped_query_attention"]
