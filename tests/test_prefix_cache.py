"""``PrefixCacheHFLM`` generates exactly what plain lm-eval ``HFLM`` generates (float32, tiny models of every
architecture): batches with a shared prefix, without one, with mixed lengths; stop strings and max_gen_toks."""

from __future__ import annotations

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model
from lm_eval.models.huggingface import HFLM

from mathneuro.evaluation import EvalConfig
from mathneuro.evaluation.decoding.backend import MathneuroHFLM
from mathneuro.evaluation.decoding.prefix_cache import PrefixCacheHFLM, shared_prefix_length
from mathneuro.evaluation.harness import Harness
from mathneuro.models.tiny import ARCHITECTURES, tiny_model

PREFIX = "Q: Ann has 3 cats and gets 2 more. How many cats?\nA: 3 + 2 = 5. The answer is 5.\n\n"
# suffixes of very different lengths (1 to ~60 tokens): lm-eval sorts them by length into batches of 4
QUESTIONS = ["Q: Tom has 4 apples and eats one. How many are left over at the end of the day?\nA:", "Q: 7?\nA:",
             "Q: Lisa reads 12 pages a day.\nA:", "Q: x\nA:", "Q: What is 2 + 2, times three?\nA:",
             "Q: Bo runs 5 km each morning and 3 km each evening for 4 days; how far?\nA:"]


def _requests(contexts: list[str], **gen_kwargs) -> list[Instance]:
    return [Instance("generate_until", {}, (c, dict(gen_kwargs)), i) for i, c in enumerate(contexts)]


@pytest.fixture(scope="module", params=ARCHITECTURES)
def pair(request):
    """(plain HFLM, PrefixCacheHFLM in lm-eval's batches) around the same tiny float32 model."""
    model, tok = tiny_model(request.param)
    plain = HFLM(pretrained=model, tokenizer=tok, batch_size=4)
    fast = PrefixCacheHFLM(pretrained=model, tokenizer=tok, batch_size=4, min_prefix_tokens=8,
                           continuous_batching="off")
    return plain, fast


def _both(pair, contexts, **gen_kwargs):
    plain, fast = pair
    return (plain.generate_until(_requests(contexts, **gen_kwargs), disable_tqdm=True),
            fast.generate_until(_requests(contexts, **gen_kwargs), disable_tqdm=True))


def test_shared_prefix_mixed_lengths_match_plain_hflm(pair):
    contexts = [PREFIX + q for q in QUESTIONS]
    expected, got = _both(pair, contexts, until=["\n\n"], max_gen_toks=10, do_sample=False)
    assert got == expected
    stats = pair[1].prefix_stats
    assert stats.batches == 2 and stats.cached_batches == 2 and stats.greedy_batches == 2
    assert stats.prefix_computations == 1  # the second batch reuses the first batch's prefix
    assert stats.prefix_tokens_skipped >= (4 - 1 + 2 - 1) * len(PREFIX)


def test_batch_without_shared_prefix_is_decoded_by_the_greedy_loop_without_a_cache(pair):
    contexts = [q.replace("Q:", c) for q, c in zip(QUESTIONS, "ABCDEF", strict=True)]
    expected, got = _both(pair, contexts, until=["Q:"], max_gen_toks=8)
    assert got == expected
    stats = pair[1].prefix_stats
    assert stats.cached_batches == 0 and stats.batches == stats.greedy_batches == 2
    expected, got = _both(pair, contexts, until=["Q:"], max_gen_toks=8, repetition_penalty=1.5)
    assert got == expected  # not greedy search: model.generate, as plain HFLM
    assert pair[1].prefix_stats.greedy_batches == 0 and pair[1].prefix_stats.batches == 2


def test_stop_strings_cut_each_row_as_plain_hflm(pair):
    contexts = [PREFIX + q for q in QUESTIONS]
    free, _ = _both(pair, contexts, until=[], max_gen_toks=12)
    stop = _a_written_character(free)
    expected, got = _both(pair, contexts, until=[stop], max_gen_toks=12)
    assert got == expected
    assert got == [t[: t.index(stop)] if stop in t else t for t in free]  # each row cut before its first stop
    assert any(len(g) < len(t) for g, t in zip(got, free, strict=True))
    assert pair[1].prefix_stats.greedy_batches == 2


def _a_written_character(texts: list[str]) -> str:
    """A character some row writes after at least one other character (else any it writes); a printable one if
    there is one (random byte models often write invalid UTF-8, decoded as U+FFFD: a stop string as good as any)."""
    chars = [(c == "\ufffd", j == 0, c) for t in texts for j, c in enumerate(t) if not c.isspace()]
    assert chars, texts
    return min(chars)[2]


def test_max_gen_toks_is_honoured(pair):
    contexts = [PREFIX + q for q in QUESTIONS]
    short_expected, short = _both(pair, contexts, until=[], max_gen_toks=3)
    long_expected, long = _both(pair, contexts, until=[], max_gen_toks=9)
    assert short == short_expected and long == long_expected
    tok = pair[1].tokenizer
    assert all(len(tok(s, add_special_tokens=False)["input_ids"]) <= 3 * 3 for s in short)  # <= 3 tokens (bytes)
    assert any(len(a) < len(b) for a, b in zip(short, long, strict=True))


def test_logits_processor_kwargs_go_through_generate_with_the_cache(pair):
    contexts = [PREFIX + q for q in QUESTIONS]
    expected, got = _both(pair, contexts, until=["\n\n"], max_gen_toks=8, repetition_penalty=1.5)
    assert got == expected
    stats = pair[1].prefix_stats
    assert stats.cached_batches == 2 and stats.greedy_batches == 0


def test_shared_prefix_length():
    assert shared_prefix_length([[1, 2, 3], [1, 2, 4], [1, 2]]) == 2
    assert shared_prefix_length([[5, 6]]) == 2 and shared_prefix_length([]) == 0
    assert shared_prefix_length([[1], [2]]) == 0


def test_eval_prefix_cache_selects_the_wrapper(data_dir):
    model, tok = tiny_model("llama")
    on = Harness(model, tok, EvalConfig(name="t", tasks=["gsm8k_cot"], data_dir=str(data_dir)), data_dir)
    off = Harness(model, tok, EvalConfig(name="t", tasks=["gsm8k_cot"], data_dir=str(data_dir), prefix_cache=False),
                  data_dir)
    # one backend, lm-eval's mathneuro-hf, built from the registry; eval.prefix_cache is its prefix_cache option
    assert type(on.lm) is type(off.lm) is get_model("mathneuro-hf") is MathneuroHFLM
    assert isinstance(on.lm, PrefixCacheHFLM) and on.lm.prefix_cache and not off.lm.prefix_cache


def test_gsm8k_cot_scores_equal_with_and_without_prefix_cache(data_dir):
    model, tok = tiny_model("qwen2")
    results = {}
    for flag in (True, False):
        cfg = EvalConfig(name="t", tasks=["gsm8k_cot"], data_dir=str(data_dir), limit=4, batch_size=4, num_fewshot=1,
                         max_gen_toks=6, max_length=2048, bootstrap_iters=0, prefix_cache=flag)
        harness = Harness(model, tok, cfg, data_dir)
        results[flag] = harness.run("gsm8k_cot").metrics
        if flag:
            assert harness.lm.prefix_stats.cached_batches == 1
        else:  # hf's own code: the engine saw no batch
            assert harness.lm.prefix_stats.batches == 0
    assert results[True] == results[False]


# ------------------------------------------------------------------------------- log-likelihood
ARTICLE = ("The library opened in 1901 with four rooms and two thousand books. Its first keeper, "
           "Mary Hale, lent books to farmers who came to town on market days.\n\nQuestion: Who was the first keeper?\n")
CHOICES = [" Mary Hale", " A farmer who came on market days", " Nobody", " The town council of 1901, after a vote"]


def _ll_requests(lm, pairs: list[tuple[str, str]]) -> list:
    """lm-eval's encoded requests ``((context, continuation), context_enc, continuation_enc)``."""
    out = []
    for context, continuation in pairs:
        context_enc, continuation_enc = lm._encode_pair(context, continuation)
        out.append(((context, continuation), context_enc, continuation_enc))
    return out


def test_choices_sharing_a_context_score_as_plain_hflm(pair):
    plain, fast = pair
    pairs = ([(ARTICLE + "Answer:", c) for c in CHOICES]                   # one context, four choices
             + [(ARTICLE + "Which year?\nAnswer:", c) for c in (" 1901", " 1902 or later")]
             + [("Q: lone context\nA:", " yes it is")]                      # shared by no other request
             + [(ARTICLE + "Single:", c) for c in ("A", "B")])              # one-token choices: last position only
    requests = _ll_requests(plain, pairs)
    assert [len(r[2]) for r in requests[-2:]] == [1, 1]
    expected = plain._loglikelihood_tokens(requests, disable_tqdm=True)
    got = fast._loglikelihood_tokens(requests, disable_tqdm=True)
    assert [g for _, g in got] == [g for _, g in expected]
    assert [v for v, _ in got] == pytest.approx([v for v, _ in expected], rel=1e-4, abs=1e-4)
    stats = fast.prefix_stats
    assert stats.shared_contexts == 2  # the two multi-token groups
    assert (stats.last_token_contexts, stats.last_token_requests) == (1, 2)  # the lone context went through lm-eval
    context = len(requests[0][1])
    assert stats.context_tokens_skipped >= 3 * context


def test_a_context_that_would_be_truncated_takes_the_plain_path():
    model, tok = tiny_model("llama")
    plain = HFLM(pretrained=model, tokenizer=tok, batch_size=4, max_length=48)
    fast = PrefixCacheHFLM(pretrained=model, tokenizer=tok, batch_size=4, max_length=48, min_prefix_tokens=8)
    requests = _ll_requests(plain, [(ARTICLE + "Answer:", c) for c in CHOICES])
    assert len(requests[0][1]) > 48  # lm-eval cuts the context from the left
    expected = plain._loglikelihood_tokens(requests, disable_tqdm=True)
    got = fast._loglikelihood_tokens(requests, disable_tqdm=True)
    assert got == expected and fast.prefix_stats.shared_contexts == 0


def _both_paths(model, tok, data_dir, task: str) -> dict[bool, tuple]:
    """``{prefix_cache: (metrics, per-example records, the harness's lm)}`` of ``task`` run with and without."""
    out = {}
    for flag in (True, False):
        cfg = EvalConfig(name="t", tasks=[task], data_dir=str(data_dir), limit=2, batch_size=4, bootstrap_iters=0,
                         prefix_cache=flag, log_samples=True)
        harness = Harness(model, tok, cfg, data_dir)
        run = harness.run(task)
        out[flag] = (run.metrics, run.samples, harness.lm)
    return out


def test_race_scores_equal_with_and_without_prefix_cache(data_dir):
    model, tok = tiny_model("qwen2")
    runs = _both_paths(model, tok, data_dir, "race")
    assert runs[True][2].prefix_stats.shared_contexts == 2  # one per article: its choices share it
    assert runs[True][0] == runs[False][0]
    assert [r["acc"] for r in runs[True][1]["race"]] == [r["acc"] for r in runs[False][1]["race"]]


# ----------------------------------------------------------------- one-token continuations (MMLU's letters)
LETTERS = ["A", "B", "C", "D"]  # one byte token each


def _mc_prompts() -> list[str]:
    """Multiple-choice prompts of very different lengths, so that every batch of 4 is left-padded."""
    return [f"Question {i}: {'why ' * (3 * i)}is the sky blue?\nA. air\nB. sea\nC. paint\nD. none\nAnswer:"
            for i in range(7)]


def _lm_head_lengths(model, run) -> list[int]:
    """The sequence lengths the output layer saw while ``run()`` ran."""
    seen: list[int] = []
    handle = model.get_output_embeddings().register_forward_hook(lambda m, args, out: seen.append(args[0].shape[1]))
    try:
        run()
    finally:
        handle.remove()
    return seen


def test_one_token_continuations_score_as_plain_hflm_from_the_last_position_only(pair):
    plain, fast = pair
    requests = _ll_requests(plain, [(p, c) for p in _mc_prompts() for c in LETTERS])
    assert {len(r[2]) for r in requests} == {1}
    context = requests[0][1]
    with torch.no_grad():
        top = int(fast.model(torch.tensor([context])).logits[0, -1].argmax())
    requests.append(((requests[0][0][0], "<the greedy token>"), context, [top]))  # a greedy continuation too
    expected = plain._loglikelihood_tokens(requests, disable_tqdm=True)
    got: list = []
    lengths = _lm_head_lengths(fast.model, lambda: got.extend(fast._loglikelihood_tokens(requests, disable_tqdm=True)))
    assert [g for _, g in got] == [g for _, g in expected]
    assert [v for v, _ in got] == pytest.approx([v for v, _ in expected], rel=1e-4, abs=1e-4)
    assert got[-1][1] and sum(g for _, g in got) >= 1
    stats = fast.prefix_stats
    assert (stats.last_token_contexts, stats.last_token_requests) == (7, 29)
    assert lengths == [1, 1]  # two batches of 4 and 3 prompts; lm-eval's output layer sees every position
    assert max(_lm_head_lengths(plain.model, lambda: plain._loglikelihood_tokens(requests, disable_tqdm=True))) > 20


def test_one_token_requests_with_auto_batch_size_or_truncation_take_lm_evals_path():
    model, tok = tiny_model("llama")
    prompts = _mc_prompts()
    plain = HFLM(pretrained=model, tokenizer=tok, batch_size=4, max_length=100)
    requests = _ll_requests(plain, [(p, c) for p in prompts for c in LETTERS])
    expected = plain._loglikelihood_tokens(requests, disable_tqdm=True)
    short = PrefixCacheHFLM(pretrained=model, tokenizer=tok, batch_size=4, max_length=100)
    got = short._loglikelihood_tokens(requests, disable_tqdm=True)
    assert [g for _, g in got] == [g for _, g in expected]
    assert [v for v, _ in got] == pytest.approx([v for v, _ in expected], rel=1e-4, abs=1e-4)
    fits = sum(len(r[1]) <= 100 for r in requests) // len(LETTERS)
    assert 0 < fits < len(prompts) and short.prefix_stats.last_token_contexts == fits  # the rest lm-eval truncates
    auto = PrefixCacheHFLM(pretrained=model, tokenizer=tok, batch_size="auto", max_length=100)
    auto._loglikelihood_tokens(requests[:4], disable_tqdm=True, override_bs=2)
    assert auto.prefix_stats.last_token_contexts == 0


def test_mmlu_scores_equal_with_and_without_prefix_cache(data_dir):
    model, tok = tiny_model("qwen2")
    tok.add_tokens([" A", " B", " C", " D"])  # a real tokenizer's one-token answer letters
    model.resize_token_embeddings(len(tok))
    runs = _both_paths(model, tok, data_dir, "mmlu")
    samples = runs[True][1]
    questions = sum(len(v) for k, v in samples.items() if k != "mmlu")
    assert runs[True][2].prefix_stats.last_token_contexts == questions > 0
    assert runs[True][0] == pytest.approx(runs[False][0], abs=1e-6)
    assert {k: [r["acc"] for r in v] for k, v in samples.items()} == {k: [r["acc"] for r in v]
                                                                      for k, v in runs[False][1].items()}


def test_a_later_batch_sharing_less_of_the_stored_prefix_crops_it(pair):
    """The first batch's prefix runs into its questions; the second batch shares only the exemplar: the stored
    cache is cropped to what they share (transformers >= 5 crops by a negative count) and reused."""
    long = [PREFIX + f"Q: The long question number {i} about apples and pears?\nA:" for i in range(4)]
    contexts = long + [PREFIX + "Q: x\nA:", PREFIX + "Q: 7?\nA:"]
    expected, got = _both(pair, contexts, until=["\n\n"], max_gen_toks=6)
    assert got == expected
    stats = pair[1].prefix_stats
    assert stats.cached_batches == 2 and stats.prefix_computations == 1
