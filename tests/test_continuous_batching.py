"""Continuous batching: greedy requests decode ``batch_size`` rows at a time, a finished row's slot going to the
next request, with exactly the texts of lm-eval's fixed batches (float32, every tiny architecture).

Rows are made to end at different points (the end-of-sequence token is one the rows write at
different places), so that slots free up mid-batch and waiting requests join rows already decoding:
their caches, of different widths, are joined row-wise. Requests that are not plain greedy (sampling)
still run in lm-eval's batches.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from lm_eval.models.huggingface import HFLM

from mathneuro.evaluation.config import EvalConfig
from mathneuro.evaluation.decoding.drafted import sliding_window
from mathneuro.evaluation.decoding.drafts import DraftStore, attach_draft_store
from mathneuro.evaluation.decoding.prefix_cache import PrefixCacheHFLM
from mathneuro.models.tiny import ARCHITECTURES, tiny_model
from tests.test_prefix_cache import PREFIX, QUESTIONS, _requests

SHOTS = {"few-shot": [PREFIX + q for q in QUESTIONS], "zero-shot": QUESTIONS}
SLOTS = 2  # 6 requests, 2 at a time: every request after the second joins rows already decoding


@pytest.fixture(scope="module", params=[(a, s) for a in ARCHITECTURES for s in SHOTS],
                ids=[f"{a}-{s}" for a in ARCHITECTURES for s in SHOTS])
def lms(request):
    """A tiny float32 model wrapped with continuous batching (undrafted; and with prompt lookup), in lm-eval's
    batches, and by plain HFLM; its prompts. The model's end-of-sequence token is made one its rows write at
    different places, so that they end at different passes."""
    arch, shots = request.param
    model, tok = tiny_model(arch)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # weights larger than the tiny models' init: answers that differ from row to row
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.2)
    kw = dict(pretrained=model, tokenizer=tok, batch_size=SLOTS, min_prefix_tokens=8)
    lms = SimpleNamespace(model=model, contexts=SHOTS[shots],
                          pooled=PrefixCacheHFLM(**kw, draft="none", prompt_lookup="off", continuous_batching="on"),
                          lookup=PrefixCacheHFLM(**kw, draft="none", prompt_lookup="on", continuous_batching="on"),
                          batches=PrefixCacheHFLM(**kw, draft="none", prompt_lookup="off", continuous_batching="off"),
                          plain=HFLM(pretrained=model, tokenizer=tok, batch_size=SLOTS))
    attach_draft_store(model, None)
    store = DraftStore(None, "tiny")
    attach_draft_store(model, store)
    with store.recording():
        lms.batches.generate_until(_requests(lms.contexts, until=[], max_gen_toks=24), disable_tqdm=True)
    attach_draft_store(model, None)
    rows = [store.get_key(k) for k in store.keys()]

    def ends(t: int) -> list[int]:  # where each row would end with ``t`` as its end-of-sequence token
        return [r.index(t) + 1 if t in r else len(r) for r in rows]

    # a token no row writes first, ending the rows at the most different places (none: rows that repeat one token)
    candidates = {t for r in rows for t in r[1:]} - {r[0] for r in rows}
    saved = model.generation_config.eos_token_id
    if candidates:
        eos = max(candidates, key=lambda t: (len(set(ends(t))), max(ends(t)) - min(ends(t)), -t))
        model.generation_config.eos_token_id = [saved, eos]
    yield lms
    model.generation_config.eos_token_id = saved


def generate(lm, lms, **gen_kwargs) -> list[str]:
    return lm.generate_until(_requests(lms.contexts, **gen_kwargs), disable_tqdm=True)


def test_rows_join_as_others_finish_and_give_the_texts_of_fixed_batches(lms):
    kw = dict(until=["\n\n"], max_gen_toks=24)
    expected = generate(lms.batches, lms, **kw)
    batched = lms.batches.prefix_stats
    assert batched.greedy_batches == 3
    assert generate(lms.plain, lms, **kw) == expected
    assert generate(lms.pooled, lms, **kw) == expected
    pooled = lms.pooled.prefix_stats
    if sliding_window(lms.model) is None:
        assert pooled.greedy_batches == 1  # the six requests in one chunk, two rows at a time
        assert pooled.rows_joined >= 1  # a slot freed mid-batch went to a waiting request
    else:  # a sliding window's cache keeps the last columns only: rows cannot be joined
        assert (pooled.greedy_batches, pooled.rows_joined) == (3, 0)
    assert generate(lms.lookup, lms, **kw) == expected  # drafted by prompt lookup, rows joining too


def test_drafted_rows_join_too(lms):
    kw = dict(until=[], max_gen_toks=24)
    store = DraftStore(None, "tiny")
    attach_draft_store(lms.model, store)
    try:
        with store.recording():
            expected = generate(lms.batches, lms, **kw)
        answers = [store.get_key(k) for k in store.keys()]
        drafts = DraftStore(None, "tiny")  # every other request drafts from its answer, changed halfway
        for i, (key, answer) in enumerate(zip(store.keys(), answers, strict=True)):
            if i % 2 == 0 and answer:
                h = len(answer) // 2
                drafts.put_key(key, answer[:h] + [3 + (answer[h] - 3 + 1) % 256] + answer[h + 1:])
        attach_draft_store(lms.model, drafts)
        drafted = PrefixCacheHFLM(pretrained=lms.model, tokenizer=lms.plain.tokenizer, batch_size=SLOTS,
                                  min_prefix_tokens=8, continuous_batching="on")
        assert generate(drafted, lms, **kw) == expected
        assert drafted.prefix_stats.drafted_rows == 3 and drafted.prefix_stats.tokens_accepted > 0
    finally:
        attach_draft_store(lms.model, None)


def test_sampled_requests_run_in_lm_evals_batches(lms):
    kw = dict(until=["\n\n"], max_gen_toks=12, do_sample=True, temperature=0.7)
    torch.manual_seed(7)
    expected = generate(lms.batches, lms, **kw)
    torch.manual_seed(7)
    assert generate(lms.pooled, lms, **kw) == expected
    assert lms.pooled.prefix_stats.greedy_batches == 0 and lms.pooled.prefix_stats.batches == 3
    assert lms.pooled.prefix_stats.rows_joined == 0


def test_continuous_batching_is_on_by_default_in_float32_and_an_option_in_bf16():
    model, tok = tiny_model("llama")
    assert PrefixCacheHFLM(pretrained=model, tokenizer=tok, batch_size=2).continuous_batching
    bf16 = model.to(torch.bfloat16)
    assert not PrefixCacheHFLM(pretrained=bf16, tokenizer=tok, batch_size=2).continuous_batching
    assert PrefixCacheHFLM(pretrained=bf16, tokenizer=tok, batch_size=2, continuous_batching="on").continuous_batching


def test_the_setting_is_validated_and_leaves_the_baseline_key_alone():
    with pytest.raises(ValueError, match="eval.continuous_batching: unknown value 'yes'; allowed: auto, on, off"):
        EvalConfig(continuous_batching="yes").validate()
    assert EvalConfig(continuous_batching="off").fingerprint() == EvalConfig().fingerprint()
