"""Which generation calls are plain greedy search, and which greedy rows draft by prompt lookup.

:class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM` decodes a batch with its own greedy loop
(:mod:`~mathneuro.evaluation.decoding.drafted`) only when ``model.generate`` with the same arguments would be
plain greedy search: no sampling, beams, logits processors or other options that change which token
is picked. Everything else stays on transformers' path.

Prompt lookup (lookup in a row's prompt and its own tokens) is exact in float32 (a pass over several
tokens picks the argmax one-token passes pick) and close in bf16, where two nearly tied tokens can
swap: :func:`prompt_lookup_on` turns it on by default where the model computes in float32 or float64.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

PROMPT_LOOKUP_MODES = ("auto", "on", "off")
# Generation options that change nothing when decoding greedily (they shape sampling only).
SAMPLING_ONLY = frozenset({"do_sample", "temperature", "top_p", "top_k", "min_p", "typical_p",
                           "epsilon_cutoff", "eta_cutoff"})
# generation_config fields that add logits processors or change greedy search; any of them set -> model.generate.
GREEDY_BREAKERS = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0), "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0), "bad_words_ids": (None,), "min_length": (None, 0),
    "min_new_tokens": (None, 0), "sequence_bias": (None,), "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,), "suppress_tokens": (None,), "begin_suppress_tokens": (None,),
    "exponential_decay_length_penalty": (None,), "guidance_scale": (None, 1.0), "watermarking_config": (None,),
    "num_beams": (None, 1), "num_return_sequences": (None, 1), "penalty_alpha": (None,), "max_new_tokens": (None,),
    "stop_strings": (None,), "cache_implementation": (None, "dynamic"), "assistant_early_exit": (None,),
    "prompt_lookup_num_tokens": (None,), "length_penalty": (None, 1.0), "low_memory": (None, False),
    "logits_processor": (None,), "output_scores": (None, False), "output_logits": (None, False),
    "return_dict_in_generate": (None, False), "token_healing": (None, False),
}


def normalise_greedy_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """HFLM's ``_model_generate`` treatment of temperature / do_sample, without its side effects."""
    kwargs = dict(kwargs)
    kwargs["temperature"] = kwargs.get("temperature", 0.0)
    if kwargs["temperature"] == 0.0 and kwargs.get("do_sample") is None:
        kwargs["do_sample"] = False
    if kwargs.get("do_sample") is False and kwargs["temperature"] == 0.0:
        kwargs.pop("temperature")
    return kwargs


def is_plain_greedy(model: torch.nn.Module, kwargs: dict[str, Any], think_end_token: Any = None) -> bool:
    """Whether ``model.generate`` with lm-eval's generation ``kwargs`` (no attention mask) is plain greedy
    search, so that a greedy loop gives its tokens."""
    if isinstance(think_end_token, (int, str)) and think_end_token != "":
        return False  # text after a stop string may matter (think tokens are cut first)
    kwargs = normalise_greedy_kwargs(kwargs)
    if any(k not in SAMPLING_ONLY for k in kwargs):
        return False
    gen_cfg = copy.deepcopy(model.generation_config)
    for key, value in kwargs.items():
        setattr(gen_cfg, key, value)
    if getattr(gen_cfg, "do_sample", False):
        return False
    return all(getattr(gen_cfg, key, None) in allowed for key, allowed in GREEDY_BREAKERS.items())


def prompt_lookup_on(model: torch.nn.Module, mode: str, mixed_precision: torch.dtype | None = None) -> bool:
    """Whether greedy rows without a draft draft by prompt lookup (see :func:`on_where_exact`)."""
    return on_where_exact(model, mode, mixed_precision, key="prompt_lookup")


def on_where_exact(model: torch.nn.Module, mode: str, mixed_precision: torch.dtype | None = None,
                   key: str = "prompt_lookup") -> bool:
    """Whether an option that keeps greedy tokens exact in float32 only (prompt lookup, continuous batching)
    is on: ``"on"``, ``"off"``, or ``"auto"``: where the model computes in float32 or float64 (no autocast
    to a lower precision). ``key`` names the option in the error for an unknown mode."""
    if mode not in PROMPT_LOOKUP_MODES:
        raise ValueError(f"{key}: unknown value {mode!r}; allowed: {', '.join(PROMPT_LOOKUP_MODES)}")
    if mode != "auto":
        return mode == "on"
    try:
        dtype = next(model.parameters()).dtype
    except StopIteration:
        return False
    return mixed_precision is None and dtype in (torch.float32, torch.float64)


__all__ = ["GREEDY_BREAKERS", "PROMPT_LOOKUP_MODES", "SAMPLING_ONLY", "is_plain_greedy", "normalise_greedy_kwargs",
           "on_where_exact", "prompt_lookup_on"]
