"""``PrefixCacheHFLM``: lm-eval's ``HFLM`` that computes a prompt shared by several requests once.

Generation (``generate_until``) shares the few-shot prefix of a batch; log-likelihood
(``_loglikelihood_tokens``) shares the context of a multiple-choice question among its choices,
and scores one-token continuations from the last position only
(:mod:`~mathneuro.evaluation.decoding.loglikelihood_sharing`).

Every request of a few-shot generation task starts with the same exemplars (about 800 of the
~900 prompt tokens of ``gsm8k_cot``). Plain ``HFLM`` runs them again for every request. Here each
batch that lm-eval forms (its ``Collator`` order, its ``gen_kwargs`` grouping, its tokenisation
and truncation: nothing of ``generate_until`` is re-implemented) is split into the longest token
prefix its rows share and the per-row suffixes:

- the prefix's keys/values are computed once, unpadded, at positions ``0 .. P-1``, and kept for
  the next batches of the same call (cropped to what they share with a new batch);
- each batch continues from a copy of that cache expanded to the batch; the suffixes are
  left-padded *after* the prefix, the attention mask covers ``prefix + padded suffix`` and the
  position ids count real tokens only, so every real token sees the same context at the same
  positions as in plain ``HFLM`` (where the pads sit before the prefix);
- other requests (sampling, beams, logits processors) go through ``model.generate`` with the cache.

Every greedy batch (lm-eval's default), with a shared prefix or without one (a zero-shot task, a
chat template), is decoded by one loop (:mod:`~mathneuro.evaluation.decoding.drafted`) that drops a row from
the batch once its output text is final (a stop string in its text, EOS, or ``max_gen_toks``); the
shared-prefix cache is where it starts when the rows share at least ``min_prefix_tokens``. It drafts
from the unedited model's answers where the model's draft store holds them, and a row without one by
lookup in its prompt and its own tokens (``prompt_lookup``: on in float32, where the tokens are
those of undrafted decoding; an option in bf16).

The token tensor returned has plain ``HFLM``'s layout (context width + generated tokens, pads
after a row ends), so lm-eval's own decoding, stop-string cut, think-token handling and cache hook
run unchanged. Non-greedy batches whose rows share fewer than ``min_prefix_tokens`` tokens,
seq2seq models, models with non-attention layers, and sliding-window models whose window is
shorter than the sequence take the ordinary path.

Outputs equal plain ``HFLM``'s up to floating-point rounding: the prefix is computed in a batch of
one instead of inside a padded batch, so in bf16 a greedy path can part where two tokens nearly
tie (measured in ``experiments/benchmarks/bench_eval.py``; README). One deliberate difference: a stop string
that decoding hides (a special token such as ``<|im_end|>`` that is not the EOS id) ends its row
where it appears; plain ``HFLM`` keeps generating that row until every row of the batch has
stopped, so its text there depends on the batch.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Sequence
from typing import Any

import torch
from lm_eval.models.huggingface import HFLM

from mathneuro.evaluation.decoding.batch_journal import batch_journal_of
from mathneuro.evaluation.decoding.chunks import CHUNK_BATCHES, in_lm_eval_batches
from mathneuro.evaluation.decoding.draft_lookup import DraftPlanner, RowDraft
from mathneuro.evaluation.decoding.drafted import (
    greedy_decode,
    max_logit_positions,
    sliding_window,
    token_cost,
)
from mathneuro.evaluation.decoding.drafts import DraftCounts, draft_settings, draft_store_of
from mathneuro.evaluation.decoding.gqa_attention import grouped_query_attention
from mathneuro.evaluation.decoding.greedy_search import is_plain_greedy, on_where_exact, prompt_lookup_on
from mathneuro.evaluation.decoding.loglikelihood_sharing import SharedContextScoring
from mathneuro.evaluation.decoding.prefix_stats import PrefixStats
from mathneuro.evaluation.generation import cache_kwarg, generation_eos_ids, last_logit_only, returned_cache
from mathneuro.evaluation.stop_watch import StopWatch

log = logging.getLogger(__name__)

_ATTENTION_LAYERS = ("full_attention", "sliding_attention")


def shared_prefix_length(rows: Sequence[Sequence[int]]) -> int:
    """The number of leading tokens every row has in common (0 for no rows)."""
    if not rows:
        return 0
    first = rows[0]
    n = min(len(r) for r in rows)
    for i in range(n):
        token = first[i]
        if any(r[i] != token for r in rows):
            return i
    return n


class PrefixCacheHFLM(SharedContextScoring, HFLM):
    """``HFLM`` whose ``generate_until`` runs a batch's shared token prefix once and continues each request from it.

    Build it like ``HFLM`` (``pretrained=model, tokenizer=tok, batch_size=8``); ``min_prefix_tokens``
    is the shortest shared prefix worth a cache. ``draft``: ``"baseline"`` drafts greedy decoding from
    the model's draft store (:mod:`~mathneuro.evaluation.decoding.drafts`), ``"none"`` does not; ``prompt_lookup``:
    rows without such a draft draft by lookup in their prompt and own tokens (``"auto"``: where the
    model computes in float32, ``"on"``, ``"off"``); ``draft_tokens``: the length of lookup drafts (None:
    adaptive); ``continuous_batching`` (the same modes): lm-eval hands over requests
    :data:`CHUNK_BATCHES` batches at a time, greedy ones decode ``batch_size`` rows at once and a
    finished row's slot goes to the next request, the rest run in lm-eval's batches.
    ``prefix_stats`` describes the last call.
    """

    def __init__(self, *args: Any, min_prefix_tokens: int = 16, draft: str = "baseline",
                 draft_tokens: int | None = None, prompt_lookup: str = "auto", continuous_batching: str = "auto",
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.min_prefix_tokens = max(1, int(min_prefix_tokens))
        self.draft, self.draft_tokens = draft, draft_tokens
        self.prompt_lookup = prompt_lookup_on(self.model, prompt_lookup, self.mixed_precision_dtype)
        self.continuous_batching = on_where_exact(self.model, continuous_batching, self.mixed_precision_dtype,
                                                  key="continuous_batching")
        self._slots: int | None = None  # within generate_until with continuous batching: rows decoding at once
        self._planner: DraftPlanner | None = None  # drafting's acceptance estimates, learnt per call
        self.prefix_stats = PrefixStats()
        self._prefix_ids: list[int] | None = None
        self._prefix_cache = None
        self._prefix_origin: list[int] | None = None  # the tokens the prefix cache was computed from (before crops)
        self._journal_depth = 0  # >0 inside a journalled batch (its sub-batches are not journalled apart)
        self._journal_state: dict[str, Any] | None = None  # the state the last batch read from the journal left
        self._unsupported: str | None = None

    # ------------------------------------------------------------------ lm-eval entry point
    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """lm-eval's ``generate_until``, unchanged; each batch's model call continues from a shared-prefix cache.

        The prefix cache lives for this call only: the weights may be edited between calls.
        """
        self.prefix_stats = PrefixStats()
        self._drop_prefix()
        self._planner = None
        self._journal_state = None
        batch_size = self.batch_size
        if self.continuous_batching and isinstance(batch_size, int) and batch_size >= 1:
            self._slots, self.batch_size_per_gpu = batch_size, batch_size * CHUNK_BATCHES
        try:
            with grouped_query_attention(self.model):
                return super().generate_until(requests, disable_tqdm=disable_tqdm)
        finally:
            self._slots, self.batch_size_per_gpu = None, batch_size
            self._drop_prefix()

    def _drop_prefix(self) -> None:
        self._prefix_ids, self._prefix_cache, self._prefix_origin = None, None, None

    # ------------------------------------------------------------------ the batch journal
    def _decoding_state(self) -> dict[str, Any]:
        """What this batch leaves to the next one of the call: the planner's counts, the prefix cache's tokens."""
        return {"planner": copy.deepcopy(self._planner.counts) if self._planner is not None else None,
                "prefix_origin": list(self._prefix_origin) if self._prefix_origin is not None else None,
                "prefix_len": len(self._prefix_ids) if self._prefix_ids is not None else 0}

    def _restore_decoding_state(self, state: dict[str, Any]) -> None:
        """Rebuild the state the journalled batches left: the planner, and the prefix cache computed as they
        computed it (from the same tokens, then cropped), so the next batch's numbers are an uninterrupted run's."""
        counts = state.get("planner")
        if counts is None:
            self._planner = None
        else:
            self._planner = DraftPlanner(token_cost(self.model), self.draft_tokens,
                                         max_pass_tokens=max_logit_positions(self.model))
            self._planner.counts = {kind: list(pair) for kind, pair in counts.items()}
        self._drop_prefix()
        origin, kept = state.get("prefix_origin"), int(state.get("prefix_len") or 0)
        if origin:
            plen, cache = self._prefix_for(list(origin))
            if cache is not None and kept < plen:
                cache.crop(kept - plen)
                self._prefix_ids = list(origin)[:kept]

    def _model_generate(self, context: torch.Tensor, max_length: int, stop: list[str],
                        **generation_kwargs: Any) -> torch.Tensor:
        """One of lm-eval's batches; with a batch journal on the model (:mod:`..batch_journal`), answered from it
        when an earlier attempt kept it, else decoded and kept."""
        journal = batch_journal_of(self.model) if self._journal_depth == 0 else None
        key = None
        if journal is not None:
            settings = {k: v for k, v in generation_kwargs.items() if k != "attention_mask"}
            key = journal.key(context, generation_kwargs.get("attention_mask"), max_length, stop, settings)
        if key is not None:
            kept = journal.get(key)
            if kept is not None:
                tokens, self._journal_state = kept
                return tokens.to(context.device)
        if self._journal_state is not None:  # the first batch to decode after kept ones
            state, self._journal_state = self._journal_state, None
            self._restore_decoding_state(state)
        self._journal_depth += 1
        try:
            out = self._decode_batch(context, max_length, stop, **generation_kwargs)
        finally:
            self._journal_depth -= 1
        if key is not None:
            journal.put(key, out, self._decoding_state())
        return out

    def _in_lm_eval_batches(self, context: torch.Tensor, max_length: int, stop: list[str],
                            generation_kwargs: dict[str, Any]) -> torch.Tensor:
        """A chunk that does not decode with continuous batching: in lm-eval's batches of ``batch_size``."""
        slots, self._slots = self._slots, None
        try:
            return in_lm_eval_batches(self._model_generate, context, max_length, stop, generation_kwargs, slots,
                                      self._pad_id())
        finally:
            self._slots = slots

    def _decode_batch(self, context: torch.Tensor, max_length: int, stop: list[str],
                      **generation_kwargs: Any) -> torch.Tensor:
        mask = generation_kwargs.get("attention_mask")
        chunk = self._slots is not None and context.shape[0] > self._slots  # more rows than decode at once
        reason = self._why_not_cached(context, mask, max_length)
        if reason is None:
            kwargs = {k: v for k, v in generation_kwargs.items() if k != "attention_mask"}
            greedy = is_plain_greedy(self.model, kwargs, self.think_end_token)
            if chunk and not (greedy and sliding_window(self.model) is None):
                return self._in_lm_eval_batches(context, max_length, stop, generation_kwargs)
            self.prefix_stats.batches += 1
            rows = [context[i][mask[i].bool()].tolist() for i in range(context.shape[0])]
            shared = min(shared_prefix_length(rows), min(len(r) for r in rows) - 1)
            if shared >= self.min_prefix_tokens or greedy:
                return self._generate_from_prefix(context, mask, rows, shared if shared >= self.min_prefix_tokens
                                                  else 0, max_length, stop, kwargs, greedy)
        elif chunk:
            return self._in_lm_eval_batches(context, max_length, stop, generation_kwargs)
        else:
            self.prefix_stats.batches += 1
        return super()._model_generate(context, max_length, stop, **generation_kwargs)

    # ------------------------------------------------------------------ eligibility
    def _why_not_cached(self, context: torch.Tensor, mask: torch.Tensor | None, max_length: int) -> str | None:
        if mask is None or context.shape[0] < 1:
            return "no attention mask"
        return self._model_reason(max_length)

    def _model_reason(self, max_length: int) -> str | None:
        """Why this model cannot continue from a cache over sequences of ``max_length`` tokens (None: it can)."""
        if self.backend != "causal":
            return "seq2seq"
        if self._unsupported is not None:
            return self._unsupported
        config = self.model.config
        layer_types = getattr(config, "layer_types", None) or ()
        if any(t not in _ATTENTION_LAYERS for t in layer_types):
            return self._mark_unsupported(f"layer types {sorted(set(layer_types))}")
        if getattr(config, "attention_chunk_size", None):
            return self._mark_unsupported("chunked attention")
        window = getattr(config, "sliding_window", None)
        has_sliding = "sliding_attention" in layer_types or (window and getattr(config, "use_sliding_window", True))
        if has_sliding and window and max_length > window:
            # pads between prefix and suffix would push old tokens out of the window earlier than in plain HFLM
            return "sequence longer than the sliding window"
        cache_impl = getattr(self.model.generation_config, "cache_implementation", None)
        if cache_impl not in (None, "dynamic"):
            return self._mark_unsupported(f"cache_implementation={cache_impl!r}")
        return None

    def _mark_unsupported(self, reason: str) -> str:
        self._unsupported = reason
        log.info("prefix cache off for this model (%s): plain HFLM generation", reason)
        return reason

    # ------------------------------------------------------------------ the cached path
    def _autocast(self):
        if self.mixed_precision_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=self.mixed_precision_dtype)

    def _prefix_for(self, prefix: list[int]):
        """``(P, cache)``: a cache of the first ``P`` tokens of ``prefix``, reused from earlier batches when it fits."""
        stored = self._prefix_ids
        if stored is not None:
            common = shared_prefix_length([stored, prefix])
            if common == len(stored) and len(prefix) <= 2 * common:
                return common, self._prefix_cache  # the stored prefix covers most of this one
            if common >= self.min_prefix_tokens and len(prefix) <= 2 * common and common < len(stored):
                self._prefix_cache.crop(common - len(stored))  # transformers >= 5 crops by a negative count
                self._prefix_ids = stored[:common]
                return common, self._prefix_cache
        ids = torch.tensor([prefix], dtype=torch.long, device=self.device)
        with torch.no_grad(), self._autocast():
            out = self.model(input_ids=ids, use_cache=True, **last_logit_only(self.model, ids.shape[1]))
        cache = returned_cache(out)
        if cache is None or not hasattr(cache, "batch_repeat_interleave"):
            self._mark_unsupported(f"the model returned no expandable cache ({type(cache).__name__})")
            return 0, None
        self.prefix_stats.prefix_computations += 1
        self._prefix_ids, self._prefix_cache, self._prefix_origin = list(prefix), cache, list(prefix)
        return len(prefix), cache

    def _generate_from_prefix(self, context: torch.Tensor, context_mask: torch.Tensor, rows: list[list[int]],
                              shared: int, max_length: int, stop: list[str], kwargs: dict[str, Any],
                              greedy: bool) -> torch.Tensor:
        """Generate from the cache of the ``shared`` tokens every row starts with (0: no cache, greedy only)."""
        plen, prefix_cache = self._prefix_for(rows[0][:shared]) if shared else (0, None)
        if prefix_cache is None and (shared or not greedy):
            return super()._model_generate(context, max_length, stop, attention_mask=context_mask, **kwargs)
        n, width = context.shape
        pad_id = self._pad_id()
        # [prefix | pads | suffix]: the same width as lm-eval's left-padded context, so its slicing still holds.
        ids = torch.full((n, width), pad_id, dtype=torch.long, device=context.device)
        mask = torch.zeros((n, width), dtype=torch.long, device=context.device)
        for i, row in enumerate(rows):
            ids[i, :plen] = context.new_tensor(row[:plen])
            ids[i, width - (len(row) - plen):] = context.new_tensor(row[plen:])
            mask[i, :plen] = 1
            mask[i, width - (len(row) - plen):] = 1
        if plen:
            self.prefix_stats.cached_batches += 1
            self.prefix_stats.prefix_tokens_skipped += (n - 1) * plen
        if greedy:
            self.prefix_stats.greedy_batches += 1
            return self._greedy_from_cache(ids, mask, plen, prefix_cache if plen else None, max_length, stop,
                                           pad_id, rows)
        cache = None
        if plen:
            cache = copy.deepcopy(prefix_cache)
            cache.batch_repeat_interleave(n)
        return super()._model_generate(ids, max_length, stop, attention_mask=mask,
                                       **{cache_kwarg(self.model): cache}, **kwargs)

    def _pad_id(self) -> int:
        pad = self.tokenizer.pad_token_id
        return int(pad) if pad is not None else int(self.eot_token_id)

    def _greedy_from_cache(self, ids: torch.Tensor, mask: torch.Tensor, plen: int, prefix_cache, max_length: int,
                           stop: list[str], pad_id: int, rows: list[list[int]]) -> torch.Tensor:
        """Greedy decoding of every row of ``ids`` (``[prefix | pads | suffix]``) after the ``plen`` tokens of
        ``prefix_cache`` (:func:`~mathneuro.evaluation.decoding.drafted.greedy_decode`; ``plen`` 0: no cache; with
        continuous batching ``batch_size`` rows at a time), drafted from the unedited
        model's answers to the same requests where the model's draft store holds them (``draft="baseline"``),
        and a row without one by lookup in its prompt and own tokens where ``prompt_lookup`` is on.

        Returns ``[ids | generated]`` with ``pad_id`` after each row's end, like ``generate``.
        """
        n, width = ids.shape
        budget = max(0, max_length - width)
        if budget == 0:
            return ids
        eos = generation_eos_ids(self.model)
        settings = draft_settings(stop, budget, eos)
        store = draft_store_of(self.model)
        found = [store.get(row, settings) if store is not None and self.draft == "baseline" else None for row in rows]
        drafts = [RowDraft(tokens) if tokens else RowDraft([], context=row) if self.prompt_lookup else None
                  for tokens, row in zip(found, rows, strict=True)]
        if any(d is not None for d in drafts) and self._planner is None:
            self._planner = DraftPlanner(token_cost(self.model), self.draft_tokens,
                                         max_pass_tokens=max_logit_positions(self.model))
        generated, counts = greedy_decode(self.model, ids, mask, plen, prefix_cache, budget=budget, eos=eos,
                                          watch=StopWatch(self.tokenizer, stop), drafts=drafts, planner=self._planner,
                                          window=sliding_window(self.model), autocast=self._autocast,
                                          slots=self._slots)
        stats = self.prefix_stats
        stats.greedy_passes += counts.passes
        stats.drafted_rows += counts.rows_drafted
        stats.lookup_rows += sum(d is not None for d in drafts) - counts.rows_drafted
        stats.tokens_drafted += counts.drafted
        stats.tokens_accepted += counts.accepted
        stats.rows_joined += counts.joined
        if store is not None:
            store.counts.add(DraftCounts(requests=n, requests_drafted=counts.rows_drafted,
                                         tokens_generated=counts.generated, tokens_drafted=counts.drafted,
                                         tokens_accepted=counts.accepted, passes=counts.passes))
            if store.recording_on:
                for row, tokens in zip(rows, generated, strict=True):
                    store.put(row, settings, tokens)
        out = torch.full((n, max(len(g) for g in generated)), pad_id, dtype=ids.dtype, device=ids.device)
        for i, tokens in enumerate(generated):
            out[i, :len(tokens)] = torch.tensor(tokens, dtype=ids.dtype, device=ids.device)
        return torch.cat([ids, out], dim=1)


__all__ = ["PrefixCacheHFLM", "shared_prefix_length"]
