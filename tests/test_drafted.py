"""Drafted greedy decoding gives exactly the tokens of undrafted greedy decoding (float32, every tiny architecture).

The drafts are the undrafted path's own answers, changed so that they part from what the model
generates at the first token, in the middle, inside a stop string, at EOS, at ``max_gen_toks``, or
never, or run on past the model's answer; the rows of one batch get different drafts (or none), so
they accept different lengths. Plain lm-eval ``HFLM`` gives the same texts too. Every test runs on
few-shot batches (a shared prefix, continued from its cache) and on zero-shot batches (prompts of
different lengths sharing no prefix worth a cache), and with prompt lookup alone (``lookup``: no
drafts; rows look up their prompt and own tokens), as the unedited model's own evaluation runs. The drafted
and lookup paths decode with continuous batching (float32's default: 8 requests, 4 rows at a time); the
first test also drafts in lm-eval's batches.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from lm_eval.models.huggingface import HFLM

from mathneuro.evaluation.decoding.drafts import DraftStore, attach_draft_store
from mathneuro.evaluation.decoding.prefix_cache import PrefixCacheHFLM
from mathneuro.models.tiny import ARCHITECTURES, tiny_model
from tests.test_prefix_cache import PREFIX, QUESTIONS, _requests

SHOTS = {"few-shot": [PREFIX + q for q in QUESTIONS],  # one shared prefix: every batch continues from its cache
         "zero-shot": QUESTIONS}  # only "Q: " in common: no batch shares a prefix worth a cache


def other(token: int) -> int:
    """A byte token other than ``token`` (ids 3..258 are the byte tokens)."""
    return 3 + (token - 3 + 1) % 256


def never(g):
    return g


def at_first(g):
    return [other(g[0])] + g[1:]


def in_middle(g):
    h = len(g) // 2
    return g[:h] + [other(g[h])] + g[h + 1:]


def run_on(g):
    return g + g[:6] + [40, 41, 42]


@pytest.fixture(scope="module", params=[(a, s) for a in ARCHITECTURES for s in SHOTS],
                ids=[f"{a}-{s}" for a in ARCHITECTURES for s in SHOTS])
def lms(request):
    """A tiny float32 model wrapped undrafted (no drafts, no lookup, lm-eval's batches of 4), drafted (adaptive and
    2-token lookups; rows without a draft by prompt lookup; continuous batching: float32's defaults; and in
    lm-eval's batches), by prompt lookup alone, and by plain HFLM; its prompts."""
    arch, shots = request.param
    model, tok = tiny_model(arch)
    kw = dict(pretrained=model, tokenizer=tok, batch_size=4, min_prefix_tokens=8)
    yield SimpleNamespace(model=model, tok=tok, contexts=SHOTS[shots], shots=shots,
                          undrafted=PrefixCacheHFLM(**kw, draft="none", prompt_lookup="off", continuous_batching="off"),
                          drafted=PrefixCacheHFLM(**kw), fixed=PrefixCacheHFLM(**kw, draft_tokens=2),
                          in_batches=PrefixCacheHFLM(**kw, continuous_batching="off"),
                          lookup=PrefixCacheHFLM(**kw, draft="none"),
                          plain=HFLM(pretrained=model, tokenizer=tok, batch_size=4))
    attach_draft_store(model, None)


def reference(lms, **gen_kwargs) -> tuple[list[str], DraftStore]:
    """Undrafted texts, and their tokens per request recorded as a draft store (keys in lm-eval's order)."""
    store = DraftStore(None, "tiny")
    attach_draft_store(lms.model, store)
    with store.recording():
        texts = lms.undrafted.generate_until(_requests(lms.contexts, **gen_kwargs), disable_tqdm=True)
    stats = lms.undrafted.prefix_stats
    assert stats.greedy_batches == 2 and stats.tokens_drafted == 0  # every batch in the greedy loop, undrafted
    assert stats.cached_batches == (2 if lms.shots == "few-shot" else 0)
    return texts, store


def looked_up(lms, **gen_kwargs) -> list[str]:
    """Texts decoded by prompt lookup alone (no draft store)."""
    attach_draft_store(lms.model, None)
    texts = lms.lookup.generate_until(_requests(lms.contexts, **gen_kwargs), disable_tqdm=True)
    assert lms.lookup.prefix_stats.lookup_rows == len(lms.contexts)
    return texts


def plain(lms, **gen_kwargs) -> list[str]:
    """Texts of plain lm-eval ``HFLM``."""
    return lms.plain.generate_until(_requests(lms.contexts, **gen_kwargs), disable_tqdm=True)


def drafted(lms, lm, answers: list[list[int] | None], keys: list[str], **gen_kwargs) -> list[str]:
    """Texts of ``lm`` drafting request ``i`` (lm-eval's order) from ``answers[i]`` (None: no draft)."""
    drafts = DraftStore(None, "tiny")
    for key, answer in zip(keys, answers, strict=True):
        if answer is not None:
            drafts.put_key(key, answer)
    attach_draft_store(lms.model, drafts)
    return lm.generate_until(_requests(lms.contexts, **gen_kwargs), disable_tqdm=True)


def changed(store: DraftStore, variants, basis: DraftStore | None = None) -> list[list[int] | None]:
    """Request ``i``'s tokens (from ``basis``, in the same request order, else ``store``) changed by
    ``variants[i % len(variants)]`` (a None variant: no draft)."""
    rows = [(basis or store).get_key(k) for k in (basis or store).keys()]
    return [None if v is None else v(list(g)) for g, v in zip(rows, [variants[i % len(variants)]
                                                                      for i in range(len(rows))], strict=True)]


@pytest.mark.parametrize("variant", ["adaptive", "two-token lookups"])
def test_rows_parting_at_the_first_token_in_the_middle_or_never_give_the_undrafted_tokens(lms, variant):
    kw = dict(until=["\n\n"], max_gen_toks=16)
    expected, store = reference(lms, **kw)
    undrafted_passes = lms.undrafted.prefix_stats.greedy_passes
    lm = lms.drafted if variant == "adaptive" else lms.fixed
    # each batch of 4 mixes rows that never part, part at once, part halfway, have no draft, or run on
    answers = changed(store, [never, at_first, in_middle, None, run_on])
    assert drafted(lms, lms.in_batches, answers, store.keys(), **kw) == expected
    assert drafted(lms, lm, answers, store.keys(), **kw) == expected
    assert plain(lms, **kw) == expected
    stats = lm.prefix_stats
    assert stats.drafted_rows == sum(a is not None for a in answers) == 5
    assert stats.lookup_rows == 1  # the row without a draft: prompt lookup (float32's default)
    assert 0 < stats.tokens_accepted < stats.tokens_drafted
    assert stats.greedy_passes < undrafted_passes
    assert looked_up(lms, **kw) == expected


def test_a_draft_that_never_parts_is_accepted_and_needs_few_passes(lms):
    kw = dict(until=[], max_gen_toks=16)
    expected, store = reference(lms, **kw)
    undrafted_passes = lms.undrafted.prefix_stats.greedy_passes  # 16 per batch of 4, two batches
    assert drafted(lms, lms.drafted, changed(store, [never]), store.keys(), **kw) == expected
    stats = lms.drafted.prefix_stats
    assert stats.tokens_accepted == stats.tokens_drafted > 0  # nothing proposed was wrong
    assert undrafted_passes == 32 and stats.greedy_passes <= undrafted_passes // 2
    assert looked_up(lms, **kw) == expected


def _one_char(tok, token: int, printable: bool) -> bool:
    """Whether ``token`` decodes to one visible character (printable ASCII, or any, U+FFFD for a lone
    byte of a multi-byte character included: random byte models write many)."""
    text = tok.decode([token])
    return len(text) == 1 and not text.isspace() and (not printable or (text.isascii() and text.isprintable()))


def _two_token_stop(tok, rows: list[list[int]]) -> tuple[int, int]:
    """(row, index) of two visible one-character tokens some row writes after its first two tokens."""
    for printable in (True, False):
        for r, g in enumerate(rows):
            for i in range(2, len(g) - 2):  # the row stops before its budget ends
                pair = tok.decode(g[i:i + 2])
                if (_one_char(tok, g[i], printable) and _one_char(tok, g[i + 1], printable) and len(pair) == 2
                        and pair in tok.decode(g)):
                    return r, i
    raise AssertionError("no row writes two visible characters")


def test_drafts_parting_inside_a_stop_string_or_running_past_it(lms):
    free_kw = dict(until=[], max_gen_toks=16)
    _, free = reference(lms, **free_kw)
    rows = [free.get_key(k) for k in free.keys()]
    # a two-token stop string some row writes after its first two tokens
    at = _two_token_stop(lms.tok, rows)
    g = rows[at[0]]
    stop = lms.tok.decode(g[at[1]:at[1] + 2])
    kw = dict(until=[stop], max_gen_toks=16)
    expected, store = reference(lms, **kw)
    assert len(store.get_key(store.keys()[at[0]])) < len(g)  # that row stopped on the stop string

    def inside_stop(tokens):  # the free answer, parting at the stop string's second token
        first = next((i for i in range(len(tokens) - 1) if lms.tok.decode(tokens[i:i + 2]) == stop), None)
        return tokens if first is None else tokens[:first + 1] + [other(tokens[first + 1])] + tokens[first + 2:]

    for variants in ([inside_stop], [never, inside_stop]):  # never: the free answer runs on past the stop
        answers = changed(store, variants, basis=free)
        assert drafted(lms, lms.drafted, answers, store.keys(), **kw) == expected
        assert lms.drafted.prefix_stats.tokens_accepted > 0
    assert plain(lms, **kw) == expected
    assert looked_up(lms, **kw) == expected


def test_drafts_parting_at_eos_or_running_past_it(lms):
    free_kw = dict(until=[], max_gen_toks=16)
    _, free = reference(lms, **free_kw)
    eos = free.get_key(free.keys()[0])[4]  # a token the first row writes: made the end-of-sequence token
    config = lms.model.generation_config
    saved = config.eos_token_id
    config.eos_token_id = eos
    try:
        expected, store = reference(lms, **free_kw)
        ended = [store.get_key(k)[-1] == eos for k in store.keys()]
        assert ended[0] and any(len(store.get_key(k)) < 16 for k in store.keys())

        def at_eos(tokens):  # the free answer, parting where the model writes EOS
            return tokens if eos not in tokens else [*tokens[:tokens.index(eos)], other(eos),
                                                     *tokens[tokens.index(eos) + 1:]]

        for variants in ([at_eos], [never]):  # never: the free answer proposes EOS and runs on past it
            answers = changed(store, variants, basis=free)
            assert drafted(lms, lms.drafted, answers, store.keys(), **free_kw) == expected
        assert plain(lms, **free_kw) == expected
        assert looked_up(lms, **free_kw) == expected
    finally:
        config.eos_token_id = saved


def test_drafts_parting_at_max_gen_toks_or_longer_than_it(lms):
    kw = dict(until=[], max_gen_toks=9)
    expected, store = reference(lms, **kw)
    assert all(len(store.get_key(k)) == 9 for k in store.keys())

    def at_last(g):
        return g[:-1] + [other(g[-1])]

    for variants in ([at_last], [run_on], [at_last, run_on, never]):
        answers = changed(store, variants)
        assert drafted(lms, lms.drafted, answers, store.keys(), **kw) == expected
        assert drafted(lms, lms.fixed, answers, store.keys(), **kw) == expected
        assert lms.fixed.prefix_stats.tokens_accepted > 0
    assert looked_up(lms, **kw) == expected


def test_sampling_and_logits_processors_are_not_drafted(lms):
    kw = dict(until=["\n\n"], max_gen_toks=8, repetition_penalty=1.5)
    expected = plain(lms, **kw)
    for lm in (lms.drafted, lms.lookup):
        store = DraftStore(None, "tiny")
        attach_draft_store(lms.model, store)
        with store.recording():  # the draft store is not consulted (nor written) by model.generate
            assert lm.generate_until(_requests(lms.contexts, **kw), disable_tqdm=True) == expected
        stats = lm.prefix_stats
        assert stats.greedy_batches == 0 and stats.drafted_rows == stats.lookup_rows == 0 and store.keys() == []
        assert stats.cached_batches == (2 if lms.shots == "few-shot" else 0)


@pytest.mark.parametrize("shots", SHOTS)
@pytest.mark.parametrize("arch", ["gemma2", "gemma3"])
def test_a_sliding_window_model_drafts_only_within_its_window(arch, shots):
    """A window just longer than prompt + answer: drafting stops before rejected tokens' columns would push
    the first prompt tokens out of the window; the tokens stay those of undrafted decoding."""
    _, tok = tiny_model(arch)
    contexts = SHOTS[shots]
    # the batch of the two shortest prompts fits with 2 columns to spare; the longer batch does not fit at all
    window = max(len(tok(c)["input_ids"]) for c in sorted(contexts, key=len)[:2]) + 12 + 2
    model, tok = tiny_model(arch, sliding_window=window)
    kw = dict(pretrained=model, tokenizer=tok, batch_size=4, min_prefix_tokens=8)
    lms = SimpleNamespace(model=model, tok=tok, contexts=contexts, shots=shots,
                          undrafted=PrefixCacheHFLM(**kw, draft="none", prompt_lookup="off"),
                          drafted=PrefixCacheHFLM(**kw))
    gen = dict(until=[], max_gen_toks=12)
    try:
        store = DraftStore(None, "tiny")
        attach_draft_store(lms.model, store)
        with store.recording():
            expected = lms.undrafted.generate_until(_requests(contexts, **gen), disable_tqdm=True)
        assert lms.undrafted.prefix_stats.greedy_batches == 1  # prompt + answer fit the window in one batch
        answers = changed(store, [in_middle, at_first, never, run_on])
        assert drafted(lms, lms.drafted, answers, store.keys(), **gen) == expected
        assert lms.drafted.prefix_stats.drafted_rows >= 1
    finally:
        attach_draft_store(model, None)


def test_rows_whose_drafts_share_no_token_with_the_answer_draft_from_their_own_repeats(lms):
    kw = dict(until=[], max_gen_toks=48)
    expected, store = reference(lms, **kw)
    undrafted_passes = lms.undrafted.prefix_stats.greedy_passes

    def foreign(g):  # parts at the first token and never matches again: only the row's own tokens can propose
        return [t for t in range(3, 259) if t not in set(g)][:8]

    assert drafted(lms, lms.drafted, changed(store, [foreign]), store.keys(), **kw) == expected
    stats = lms.drafted.prefix_stats
    assert stats.tokens_accepted > 0  # accepted from the rows' own earlier tokens (random tiny models repeat)
    assert looked_up(lms, **kw) == expected
    stats = lms.lookup.prefix_stats  # no drafts: the prompt and the rows' own tokens, fewer passes
    assert 0 < stats.tokens_accepted <= stats.tokens_drafted and stats.greedy_passes < undrafted_passes
