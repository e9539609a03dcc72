"""Grouped-query attention in place (evaluation/decoding/gqa_attention.py): the same logits as transformers' SDPA,
bit for bit, on every tiny architecture, for passes of several tokens over a padded, cached prefix."""

from __future__ import annotations

import copy

import pytest
import torch

from mathneuro.evaluation.decoding.gqa_attention import NAME, grouped_query_attention
from mathneuro.evaluation.generation import cache_kwarg, returned_cache
from mathneuro.models.tiny import ARCHITECTURES, tiny_model


def _passes(model, widths=(1, 2, 5)) -> dict[int, torch.Tensor]:
    """Logits of a pass of each width over the same cached, padded 40-token prefix of 3 rows."""
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (3, 40 + max(widths)), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :7] = 0  # left pads
    mask[1, 30:33] = 0  # pads between a prefix and a suffix, as the prefix-cache path lays rows out
    kw = cache_kwarg(model)
    with torch.no_grad():
        cache = returned_cache(model(input_ids=ids[:, :40], attention_mask=mask[:, :40], use_cache=True))
        out = {}
        for w in widths:
            c = copy.deepcopy(cache)
            out[w] = model(input_ids=ids[:, 40:40 + w], attention_mask=mask[:, :40 + w], use_cache=True,
                           **{kw: c}).logits
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_logits_equal_transformers_sdpa_bit_for_bit(arch, dtype):
    model, _ = tiny_model(arch, dtype=dtype)
    stock = _passes(model)
    with grouped_query_attention(model):
        inplace = _passes(model)
    for w in stock:
        assert torch.equal(stock[w], inplace[w]), (arch, dtype, w)


def test_the_implementation_is_switched_in_the_block_and_restored_after_it_even_on_error():
    model, _ = tiny_model("qwen2")
    assert model.config._attn_implementation == "sdpa"
    with pytest.raises(RuntimeError), grouped_query_attention(model):
        assert model.config._attn_implementation == NAME
        assert all(getattr(m, "config", model.config)._attn_implementation == NAME for m in model.modules())
        raise RuntimeError("stop")
    assert model.config._attn_implementation == "sdpa"


def test_a_model_with_another_attention_implementation_is_left_as_it_is():
    model, _ = tiny_model("llama")
    model.set_attn_implementation("eager")
    with grouped_query_attention(model):
        assert model.config._attn_implementation == "eager"
    assert model.config._attn_implementation == "eager"
