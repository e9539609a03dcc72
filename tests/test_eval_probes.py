"""Built-in probes on real tiny models: exact scores on a hand-built model whose answers are known,
and batched / cached computations against straightforward per-example references."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, LlamaConfig

from mathneuro.eval_tasks.fewshot import gsm8k_cot
from mathneuro.evaluation import EvalConfig, Evaluator
from mathneuro.evaluation.config import ArithConfig, GenerationProbeConfig
from mathneuro.evaluation.generation import greedy_generate
from mathneuro.evaluation.likelihood import encode_pair, loglikelihoods, rolling_loglikelihoods
from mathneuro.evaluation.probes import (
    arith_prefix,
    arith_probe,
    arith_problems,
    gsm8k_prefix,
    mc_probe,
    mc_prompt,
    mc_records,
    ppl_probe,
    score_arith,
    score_mc,
    text_documents,
)
from mathneuro.models.tiny import byte_tokenizer, tiny_model


def _tid(tok, char: str) -> int:
    ids = tok(char, add_special_tokens=False)["input_ids"]
    assert len(ids) == 1
    return ids[0]


def bigram_model(successor: dict[str, str], default: str = "\n"):
    """A real Llama whose greedy next token depends only on the current token: ``successor[c]``.

    Embeddings are one-hot (hidden size = vocabulary), every attention and MLP output projection is
    zero, so the residual stream carries the current token's one-hot vector to the head, whose
    column for token c points at ``successor[c]``.
    """
    tok = byte_tokenizer()
    vocab = len(tok)
    hidden = 8 * math.ceil(vocab / 8)  # >= vocabulary, so token i can own hidden dimension i
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=8, num_hidden_layers=1,
                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=4096,
                      tie_word_embeddings=False, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        model.get_input_embeddings().weight.copy_(torch.eye(vocab, hidden))
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        head = torch.zeros(vocab, hidden)
        head[_tid(tok, default), :] = 1.0
        for cur, nxt in successor.items():
            head[:, _tid(tok, cur)] = 0.0
            head[_tid(tok, nxt), _tid(tok, cur)] = 1.0
        model.lm_head.weight.copy_(head)
    return model, tok


# After "=" or ":" the model always writes " 5", then a newline, then another newline.
ANSWERS_FIVE = {"=": " ", ":": " ", " ": "5", "5": "\n", "\n": "\n"}


@pytest.fixture(scope="module")
def five_model():
    return bigram_model(ANSWERS_FIVE)


def test_bigram_model_answers_five(five_model):
    model, tok = five_model
    out = greedy_generate(model, tok, ["3 + 4 =", "Q: how many?\nA:"], max_new_tokens=6, stop=("\n\n",))
    assert out == [" 5", " 5"]  # cut before the blank line


@pytest.mark.parametrize(("num_fewshot", "batch_size"), [(0, 1), (3, 7)])
def test_arith_probe_scores_known_answers_exactly(five_model, num_fewshot, batch_size):
    model, tok = five_model
    cfg = ArithConfig(num_problems=40, digits=1, operations=["+", "-"], num_fewshot=num_fewshot, seed=3)
    _, problems = arith_problems(cfg)
    expected = sum(p.answer == 5 for p in problems) / len(problems)
    assert 0 < expected < 1
    out = arith_probe(model, tok, cfg, batch_size=batch_size)
    assert out["exact_match"] == expected
    assert out["exact_match_stderr"] == pytest.approx(math.sqrt(expected * (1 - expected) / (len(problems) - 1)))
    # example by example: the problem the bigram model gets right is exactly the one whose answer is 5
    records = score_arith(model, tok, cfg, batch_size=batch_size)
    assert [r["doc_id"] for r in records] == list(range(len(problems)))
    assert [r["exact_match"] for r in records] == [float(p.answer == 5) for p in problems]
    assert {r["answer"] for r in records} == {"5"}
    assert [r["target"] for r in records] == [str(p.answer) for p in problems]


def test_arith_problems_deterministic_and_private_rng():
    random.seed(1)
    state = random.getstate()
    cfg = ArithConfig(num_problems=20, digits=2, operations=["*"], num_fewshot=2, seed=9)
    a, b = arith_problems(cfg), arith_problems(cfg)
    assert a == b and random.getstate() == state
    examples, problems = a
    assert all(10 <= p.a <= 99 and 10 <= p.b <= 99 and p.answer == p.a * p.b for p in problems)
    assert arith_prefix(examples) == "".join(f"{p.a} * {p.b} = {p.a * p.b}\n" for p in examples)


@pytest.mark.parametrize("reuse", [True, False])
def test_gsm8k_gen_is_lm_eval_gsm8k_cot_on_the_probe_file(five_model, tmp_path, reuse):
    # gsm8k_gen runs lm-eval's gsm8k_cot (prompt, stops, filters) on its problem file: the model writes " 5",
    # so flexible-extract finds 5 (right for 3 of 6) and strict-match ("The answer is N.") finds nothing.
    model, tok = five_model
    golds = [5, 7, 5, 12, 5, 3]
    records = [{"question": f"Sam has {g} apples. How many apples?", "answer": f"He has {g}.\n#### {g}"} for g in golds]
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    ecfg = EvalConfig(name="t", tasks=["gsm8k_gen"], batch_size=4, progress=False, bootstrap_iters=0)
    ecfg.gsm8k_gen = GenerationProbeConfig(file=str(path), num_fewshot=2, max_new_tokens=12, reuse_prefix_cache=reuse)
    ev = Evaluator(model, tok, ecfg)
    metrics = ev.evaluate()
    assert metrics["math/gsm8k_gen/exact_match,flexible-extract"] == pytest.approx(0.5)
    assert metrics["math/gsm8k_gen/exact_match,strict-match"] == 0.0
    assert metrics["math/gsm8k_gen/exact_match"] == metrics["math/gsm8k_gen/exact_match,strict-match"]
    assert ev.last_num_examples["gsm8k_gen"] == 6
    lm = ev._probe_contexts["gsm8k_gen"].cache["data"].harness.lm
    assert lm.prefix_cache == reuse and (lm.prefix_stats.batches > 0) == reuse  # off: hf's own code, no engine
    if reuse:  # one chunk of 6 requests with continuous batching (float32's default), else lm-eval's 2 batches
        assert lm.continuous_batching
        assert lm.prefix_stats.cached_batches == 1 and lm.prefix_stats.prefix_computations == 1


def _hf_greedy(model, tok, prompt: str, max_new_tokens: int) -> str:
    ids = torch.tensor([tok(prompt)["input_ids"]])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens, do_sample=False,
                         pad_token_id=tok.pad_token_id, eos_token_id=None)
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "phi"])
def test_generation_batched_and_cached_match_unbatched_reference(arch):
    model, tok = tiny_model(arch)
    prefix = gsm8k_prefix(gsm8k_cot(), 1)[:120]
    suffixes = ["Q: one?\nA:", "Q: a much longer question here?\nA:", "Q: x\nA:", "Q: middle length one\nA:"]
    n = 6
    reference = [_hf_greedy(model, tok, prefix + s, n) for s in suffixes]
    for reuse, bs in ((True, 3), (False, 3), (True, 1)):
        out = greedy_generate(model, tok, suffixes, prefix=prefix, max_new_tokens=n, stop=("\x00",),
                              batch_size=bs, reuse_prefix_cache=reuse)
        assert out == reference, (reuse, bs)


def test_generation_rows_stopping_at_different_steps_leave_the_batch():
    # After its last prompt character each row writes a chain of a different length, then a newline.
    model, tok = bigram_model({"1": "a", "a": "b", "b": "c", "c": "\n", "2": "x", "x": "\n", "3": "\n"})
    suffixes = ["go 1", "go 2", "go 3", "go 2", "go 1"]
    reference = [_hf_greedy(model, tok, s, 6) for s in suffixes]
    expected = [r[: r.find("\n")] for r in reference]
    assert expected == ["abc", "x", "", "x", "abc"]
    for bs in (5, 2):
        assert greedy_generate(model, tok, suffixes, max_new_tokens=6, stop=("\n",), batch_size=bs) == expected


def _reference_loglik(model, tok, context: str, continuation: str) -> float:
    ctx, cont = encode_pair(tok, context, continuation)
    ids = torch.tensor([ctx + cont])
    with torch.no_grad():
        logp = F.log_softmax(model(ids).logits[0].float(), dim=-1)
    return sum(float(logp[len(ctx) - 1 + k, t]) for k, t in enumerate(cont))


def test_loglikelihoods_match_per_example_reference():
    model, tok = tiny_model("qwen2")
    requests = [("Question: why?\nAnswer:", " because"), ("A", " b c d e f"), ("Hello there ", "world"),
                ("", "no context at all")]
    got = loglikelihoods(model, tok, requests, batch_size=3)
    want = [_reference_loglik(model, tok, c, x) for c, x in requests]
    assert got == pytest.approx(want, rel=1e-5, abs=1e-4)


def test_mc_probe_matches_reference_scores():
    model, tok = tiny_model("llama")
    records = mc_records(None)[:12]
    out = mc_probe(model, tok, records, batch_size=5)
    acc, acc_norm = [], []
    for r in records:
        scores = [_reference_loglik(model, tok, mc_prompt(r["question"]), f" {c}") for c in r["choices"]]
        norm = [s / len(f" {c}".encode()) for s, c in zip(scores, r["choices"], strict=True)]
        acc.append(float(int(np.argmax(scores)) == r["answer"]))
        acc_norm.append(float(int(np.argmax(norm)) == r["answer"]))
    assert out["acc"] == pytest.approx(np.mean(acc))
    assert out["acc_norm"] == pytest.approx(np.mean(acc_norm))


def test_mc_probe_known_answers_on_bigram_model():
    # The model puts all its mass (up to softmax temperature) on "5" after " ": a choice " 5" beats " 7".
    model, tok = bigram_model({" ": "5", ":": " "})
    records = [{"question": "pick", "choices": ["7", "5"], "answer": 1},
               {"question": "pick", "choices": ["5", "7"], "answer": 1}]
    out = mc_probe(model, tok, records, batch_size=2)
    assert out["acc"] == 0.5 and out["acc_norm"] == 0.5
    scored = score_mc(model, tok, records, batch_size=2)
    # the chosen and the right choice by their text (an index says nothing once choices are shuffled)
    assert [{k: r[k] for k in ("doc_id", "acc", "acc_norm", "answer", "target")} for r in scored] == [
        {"doc_id": 0, "acc": 1.0, "acc_norm": 1.0, "answer": "5", "target": "5"},
        {"doc_id": 1, "acc": 0.0, "acc_norm": 0.0, "answer": "5", "target": "7"}]
    # both questions read "pick": the same prompt, but different documents (their choices differ)
    assert scored[0]["prompt_hash"] == scored[1]["prompt_hash"] and scored[0]["doc_hash"] != scored[1]["doc_hash"]


def test_ppl_probe_matches_reference():
    model, tok = tiny_model("gemma2")
    docs = text_documents(None)[:3]
    max_length = 64
    out = ppl_probe(model, tok, docs, max_length=max_length, batch_size=4)
    total, tokens = 0.0, 0
    start = tok.bos_token_id
    for d in docs:
        ids = tok(d, add_special_tokens=False)["input_ids"]
        tokens += len(ids)
        for lo in range(0, len(ids), max_length - 1):
            window = [start] + ids[lo: lo + max_length - 1]
            with torch.no_grad():
                logp = F.log_softmax(model(torch.tensor([window])).logits[0].float(), dim=-1)
            total += sum(float(logp[k, window[k + 1]]) for k in range(len(window) - 1))
    assert out["token_perplexity"] == pytest.approx(math.exp(-total / tokens), rel=1e-5)
    words = sum(len(d.split()) for d in docs)
    nbytes = sum(len(d.encode()) for d in docs)
    assert out["word_perplexity"] == pytest.approx(math.exp(-total / words), rel=1e-5)
    assert out["bits_per_byte"] == pytest.approx(-total / nbytes / math.log(2), rel=1e-5)
    pairs = rolling_loglikelihoods(model, tok, docs, max_length=max_length, batch_size=2)
    assert sum(n for _, n in pairs) == tokens


def test_evaluator_probes_see_in_place_edits_and_keep_rng():
    model, tok = tiny_model("llama")
    cfg = EvalConfig(name="quick", tasks=["arith", "mc", "ppl"], batch_size=8, progress=False)
    cfg.arith.num_problems = 10
    cfg.limits.update(mc=8, ppl=2)
    ev = Evaluator(model, tok, cfg)
    def seed_and_draw(evaluate=None):
        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        result = evaluate() if evaluate else None
        return result, (random.random(), float(np.random.rand()), float(torch.rand(1)))

    before, draws = seed_and_draw(ev.evaluate)
    assert draws == seed_and_draw()[1]  # the caller's RNG streams are untouched
    assert set(before) == {
        "math/arith/exact_match", "math/arith/exact_match_stderr", "nonmath/mc/acc", "nonmath/mc/acc_stderr",
        "nonmath/mc/acc_norm", "nonmath/mc/acc_norm_stderr", "nonmath/ppl/token_perplexity",
        "nonmath/ppl/word_perplexity", "nonmath/ppl/byte_perplexity", "nonmath/ppl/bits_per_byte"}
    weight = model.model.layers[0].mlp.down_proj.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.mul_(40.0)  # an in-place edit, as the interventions make
    edited = ev.evaluate()
    assert edited["nonmath/ppl/token_perplexity"] != before["nonmath/ppl/token_perplexity"]
    with torch.no_grad():
        weight.copy_(saved)
    assert ev.evaluate() == before
    assert ev.last_num_examples == {"arith": 10, "mc": 8, "ppl": 2}
