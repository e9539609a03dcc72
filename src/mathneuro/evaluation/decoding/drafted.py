"""Greedy decoding of a batch, continuing from a shared prompt prefix's KV cache where there is one, drafted
where a draft exists.

:func:`greedy_decode` is the greedy loop of :class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM`,
for every greedy batch (few-shot, zero-shot, chat-templated). Without drafts it is plain greedy
decoding: one pass for the prompts (or their suffixes after the cached prefix), then one token per
row and pass; a row leaves the batch once its text is final (EOS, a stop string, its budget).

With drafts (:class:`~mathneuro.evaluation.decoding.draft_lookup.RowDraft`: the unedited model's answer to
the same request) a pass also feeds each row's proposed tokens, teacher-forced, after its input:
the model's argmax at every fed position comes out of the one pass (after a departure a row proposes
by lookup in that answer or in its own earlier tokens: :mod:`~mathneuro.evaluation.decoding.draft_lookup`).
A row keeps the longest run of proposed tokens equal to the model's own argmax, plus the model's
next token; every kept token is the model's own greedy choice, so the tokens are those of undrafted
greedy decoding. Rows accept
different lengths and continue together: the cached keys/values of a row's rejected tokens (and of
the pads of rows that proposed fewer) are masked out of the attention mask, the columns no row kept
are cropped from the cache, and position ids count each row's own tokens. Models with sliding-window
layers draft only while the cache stays within the window.

Numerics: a pass over k tokens and k one-token passes compute the same function with different
matrix shapes, so logits agree to the last bits only (about 1e-7 relative in float32). Argmax
decisions agree unless two tokens tie to within that, as between the prefix cache and plain HFLM;
in bf16 such near-ties are common enough that some answers part (measured in experiments/benchmarks/bench_eval.py).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from mathneuro.evaluation.decoding.draft_lookup import DraftPlanner, RowDraft
from mathneuro.evaluation.generation import cache_kwarg, returned_cache
from mathneuro.evaluation.stop_watch import StopWatch
from mathneuro.util.padding import without_pad_columns


@dataclass
class DecodeCounts:
    """What one greedy decoding did: passes, tokens generated, drafted (verified) and accepted."""

    passes: int = 0
    generated: int = 0
    rows_drafted: int = 0  # rows that had a draft (an answer; rows drafting by prompt lookup alone not counted)
    drafted: int = 0  # proposed tokens fed to the model to be verified
    accepted: int = 0  # ... that were its own argmax
    joined: int = 0  # rows that joined rows already decoding (continuous batching)


def token_cost(model: torch.nn.Module) -> float:
    """The planner's cost of one more token in a pass relative to a pass's fixed cost, by device (a fixed
    table, so that drafting decisions never depend on timings). CPU: 1/8. On an AMD EPYC with avx512_bf16
    (2 threads, Qwen2.5-Coder-0.5B, 8 rows on a 900-token cache) a bare pass costs ~68 ms + ~1.7 ms per
    row-token in bf16 and ~190 ms + ~5 ms in float32 (experiments/benchmarks/bench_pass_cost.py), but inside
    evaluation a drafted pass costs more per token (longer, masked caches, the argmax over the
    vocabulary): simulated over the GSM8K answers of experiments/benchmarks/bench_eval.py --draft with the costs
    calibrated to that run's passes, 1/8 did best or within 1 % of best for every edit. CUDA: 1/256 (a
    pass costs about the same for 1 or a few hundred tokens)."""
    return 1 / 256 if next(model.parameters()).device.type == "cuda" else 1 / 8


def max_logit_positions(model: torch.nn.Module) -> int:
    """The most positions (rows x verified tokens) one pass returns logits for: about 64 M logits."""
    vocab = int(getattr(model.config, "vocab_size", 0) or 0) or 32_000
    return max(16, min(4096, (1 << 26) // vocab))


def sliding_window(model: torch.nn.Module) -> int | None:
    """The sliding window of a model with sliding-window attention layers (None: none)."""
    config = model.config
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None) or ()
    if window and ("sliding_attention" in layer_types or getattr(config, "use_sliding_window", True)):
        return int(window)
    return None


def _takes_logits_to_keep(model: torch.nn.Module) -> bool:
    try:
        return "logits_to_keep" in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


@dataclass
class _Live:
    """The rows decoding together: their cache and attention mask over its columns, and what the next pass
    feeds them (``lead``: the prompt suffixes in a row's first pass, then its last generated token)."""

    rows: list[int]
    cache: Any
    cache_mask: torch.Tensor
    lead_ids: torch.Tensor
    lead_mask: torch.Tensor
    lead_pos: torch.Tensor


def _admit(rows: list[int], ids: torch.Tensor, mask: torch.Tensor, plen: int, prefix_cache) -> _Live:
    """The state of ``rows`` of ``ids`` before their first pass: the prefix cache copied for each of them, and
    their prompt suffixes with the columns that are padding in every one of them left out."""
    sel = torch.tensor(rows, device=ids.device)
    cache = None
    if plen:
        cache = copy.deepcopy(prefix_cache)
        cache.batch_repeat_interleave(len(rows))
    lead_ids, lead_mask = without_pad_columns(ids[sel][:, plen:], mask[sel][:, plen:])
    lead_pos = (plen + lead_mask.cumsum(-1) - 1).clamp(min=max(plen - 1, 0))
    return _Live(list(rows), cache, mask[sel][:, :plen], lead_ids, lead_mask, lead_pos)


def _pad_left(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    missing = width - t.shape[dim]
    if missing <= 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def can_merge(cache) -> bool:
    """Whether rows of two caches of this kind can be joined (full-attention layers keeping every column)."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and all(type(layer).__name__ == "DynamicLayer" for layer in layers)


def _merge(a: _Live, b: _Live) -> _Live:
    """One state of ``a``'s rows then ``b``'s: both caches left-padded (masked columns) to the wider one."""
    width = max(a.cache_mask.shape[1], b.cache_mask.shape[1])
    for la, lb in zip(a.cache.layers, b.cache.layers, strict=True):
        la.keys = torch.cat([_pad_left(la.keys, width, -2), _pad_left(lb.keys, width, -2)], dim=0)
        la.values = torch.cat([_pad_left(la.values, width, -2), _pad_left(lb.values, width, -2)], dim=0)
    mask = torch.cat([_pad_left(a.cache_mask, width, 1), _pad_left(b.cache_mask, width, 1)], dim=0)
    return _Live(a.rows + b.rows, a.cache, mask, torch.cat([a.lead_ids, b.lead_ids]),
                 torch.cat([a.lead_mask, b.lead_mask]), torch.cat([a.lead_pos, b.lead_pos]))


def refill_size(slots: int) -> int:
    """How many slots must be free before waiting rows join the batch: each joining costs a pass over their
    prompts, so rows join a few at a time (a quarter of the slots), or as soon as no row is left."""
    return max(1, -(-slots // 4))


class _Decoder:
    """One greedy decoding of a batch: every row's tokens so far, the counts, and the pass that advances a set
    of live rows (:meth:`step`)."""

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, *, budget: int,
                 eos: set[int], watch: StopWatch, drafts: Sequence[RowDraft | None] | None,
                 planner: DraftPlanner | None, window: int | None,
                 autocast: Callable[[], contextlib.AbstractContextManager]) -> None:
        n = ids.shape[0]
        self.model, self.ids, self.mask, self.device = model, ids, mask, ids.device
        self.budget, self.eos, self.watch, self.window, self.autocast = budget, eos, watch, window, autocast
        self.planner = planner
        self.drafts = list(drafts) if drafts is not None and planner is not None else [None] * n
        self.counts = DecodeCounts(rows_drafted=sum(d is not None and bool(d.answer) for d in self.drafts))
        self.generated: list[list[int]] = [[] for _ in range(n)]
        self.cache_arg = cache_kwarg(model)
        # logits of the verified positions only, as an index tensor (see generation.last_positions)
        self.positions_kwarg = _takes_logits_to_keep(model)

    def proposals(self, live: _Live) -> list[list[int]]:
        """The tokens each of ``live``'s rows proposes in its next pass, as the planner sizes them (none for rows
        without a draft)."""
        alive, drafts, generated, budget = live.rows, self.drafts, self.generated, self.budget
        lengths = [0] * len(alive)
        if any(drafts[row] is not None for row in alive):
            lead_width = live.lead_ids.shape[1]
            room = 1 << 30
            if self.window is not None:  # every column fed stays inside the window (pads and rejected tokens too)
                room = (self.window - live.cache_mask.shape[1] - lead_width
                        - max(budget - len(generated[r]) for r in alive))
            rows = [(drafts[r].kind, min(drafts[r].available(), budget - len(generated[r]) - 1))
                    if drafts[r] is not None else (None, 0) for r in alive]
            lengths = self.planner.plan(rows, lead_width, room)
        return [drafts[row].proposal(k) if k > 0 else [] for row, k in zip(alive, lengths, strict=True)]

    def fed(self, live: _Live, proposals: list[list[int]],
            width: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The ids, attention mask and position ids of a pass: each row's lead, then (``width`` > 0) its
        proposal, padded to ``width`` with filler that is masked out."""
        lead_ids, lead_mask, lead_pos = live.lead_ids, live.lead_mask, live.lead_pos
        if not width:
            return lead_ids, lead_mask, lead_pos
        device = self.device
        block = lead_ids[:, -1:].repeat(1, width)  # filler for rows that propose fewer (masked out)
        block_mask = torch.zeros((len(proposals), width), dtype=self.mask.dtype, device=device)
        for slot, proposal in enumerate(proposals):
            if proposal:
                block[slot, :len(proposal)] = torch.tensor(proposal, dtype=block.dtype, device=device)
                block_mask[slot, :len(proposal)] = 1
        offsets = torch.arange(1, width + 1, device=device)[None, :]
        own = torch.tensor([len(p) for p in proposals], device=device)[:, None]
        block_pos = lead_pos[:, -1:] + torch.minimum(offsets, own.clamp(min=1))
        return (torch.cat([lead_ids, block], dim=1), torch.cat([lead_mask, block_mask], dim=1),
                torch.cat([lead_pos, block_pos], dim=1))

    def forward(self, live: _Live, step_ids: torch.Tensor, step_mask: torch.Tensor, step_pos: torch.Tensor,
                width: int) -> tuple[Any, list[list[int]]]:
        """One pass of the model over ``step_ids`` after ``live``'s cache: the returned cache, and each row's
        argmax at its last lead position and at each of the ``width`` proposed ones."""
        lead_width = live.lead_ids.shape[1]
        keep_logits = ({"logits_to_keep": torch.arange(lead_width - 1, step_ids.shape[1], device=self.device)}
                       if self.positions_kwarg else {})
        with self.autocast():
            result = self.model(input_ids=step_ids, attention_mask=torch.cat([live.cache_mask, step_mask], dim=1),
                                position_ids=step_pos, use_cache=True, **{self.cache_arg: live.cache}, **keep_logits)
        self.counts.passes += 1
        return returned_cache(result), result.logits[:, -(width + 1):, :].argmax(dim=-1).tolist()

    def accept(self, alive: list[int], proposals: list[list[int]], choices: list[list[int]],
               lead_width: int) -> tuple[list[int], list[int]]:
        """Appends to each row its accepted proposed tokens and the model's next one, up to where the row finishes;
        the slots of the rows that go on, and how many of the pass's columns each of them keeps."""
        counts, generated, drafts, planner = self.counts, self.generated, self.drafts, self.planner
        eos, watch, budget = self.eos, self.watch, self.budget
        keep, kept_columns = [], []
        for slot, row in enumerate(alive):
            proposal, own = proposals[slot], choices[slot]
            accepted = 0
            while accepted < len(proposal) and proposal[accepted] == own[accepted]:
                accepted += 1
            counts.drafted += len(proposal)
            counts.accepted += accepted
            draft = drafts[row]
            kind = draft.kind if draft is not None else None
            finished = False
            for token in (*proposal[:accepted], own[accepted]):
                generated[row].append(token)
                counts.generated += 1
                if token in eos or watch.finished(generated[row]) or len(generated[row]) >= budget:
                    finished = True
                    break
            if draft is not None:
                planner.observe(kind, len(proposal), accepted)
                if not finished:
                    draft.advance(generated[row], len(proposal), accepted)
            if not finished:
                keep.append(slot)
                kept_columns.append(lead_width + accepted)
        return keep, kept_columns

    def carry(self, live: _Live, cache: Any, step_mask: torch.Tensor, keep: list[int], kept_columns: list[int]) -> None:
        """``live`` after a pass that fed ``step_mask``'s columns: the rows in ``keep`` only, the columns no row
        kept cropped from ``cache``, each row's rejected proposals masked, its last token the next lead."""
        device, alive = self.device, live.rows
        lead_width, last_pos = live.lead_ids.shape[1], live.lead_pos[:, -1:]
        fed = step_mask.shape[1]
        columns = max(kept_columns)
        if columns < fed:
            cache.crop(columns - fed)
        step_mask = step_mask[:, :columns].clone()
        for slot, kept in zip(keep, kept_columns, strict=True):
            step_mask[slot, kept:] = 0  # this row's rejected proposals (or pads), kept in the cache for others
        last_token = torch.tensor([self.generated[alive[slot]][-1] for slot in keep], dtype=self.ids.dtype,
                                  device=device)
        accepted_now = torch.tensor([k - lead_width for k in kept_columns], device=device)
        sel = torch.tensor(keep, device=device)
        if len(keep) < len(alive):
            cache.batch_select_indices(sel)
        live.cache = cache
        live.cache_mask = torch.cat([live.cache_mask, step_mask], dim=1)[sel]
        live.lead_pos = last_pos[sel] + 1 + accepted_now[:, None]
        live.lead_ids, live.lead_mask = last_token[:, None], torch.ones_like(live.lead_pos, dtype=self.mask.dtype)
        live.rows = [alive[slot] for slot in keep]

    def step(self, live: _Live) -> None:
        """One pass over ``live``'s rows; the rows that finish leave it."""
        proposals = self.proposals(live)
        width = max(len(p) for p in proposals)
        step_ids, step_mask, step_pos = self.fed(live, proposals, width)
        cache, choices = self.forward(live, step_ids, step_mask, step_pos, width)
        keep, kept_columns = self.accept(live.rows, proposals, choices, live.lead_ids.shape[1])
        if not keep:
            live.rows, live.cache = [], None
            return
        self.carry(live, cache, step_mask, keep, kept_columns)

    def run(self, plen: int, prefix_cache: Any, slots: int) -> None:
        """Decodes every row, at most ``slots`` at once: waiting rows join as rows finish (see :func:`refill_size`)."""
        waiting = list(range(self.ids.shape[0]))
        live: _Live | None = None
        while live is not None or waiting:
            free = slots - (len(live.rows) if live is not None else 0)
            if waiting and (live is None or free >= min(refill_size(slots), len(waiting))):
                joining = _admit(waiting[:free], self.ids, self.mask, plen, prefix_cache)
                waiting = waiting[free:]
                self.step(joining)  # the joining rows' prompt pass on its own, then one batch with the rest
                if not joining.rows:
                    continue
                if live is None:
                    live = joining
                elif can_merge(live.cache) and can_merge(joining.cache):
                    self.counts.joined += len(joining.rows)
                    live = _merge(live, joining)
                else:  # a cache whose rows cannot be joined: the joining rows finish on their own
                    while joining.rows:
                        self.step(joining)
                continue
            self.step(live)
            if not live.rows:
                live = None


@torch.no_grad()
def greedy_decode(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, plen: int, prefix_cache, *,
                  budget: int, eos: set[int], watch: StopWatch, drafts: Sequence[RowDraft | None] | None = None,
                  planner: DraftPlanner | None = None, window: int | None = None,
                  autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
                  slots: int | None = None) -> tuple[list[list[int]], DecodeCounts]:
    """Greedy tokens of every row of ``ids`` (``[prefix | pads | suffix]``, ``mask`` its attention mask)
    after the ``plen`` tokens in ``prefix_cache`` (a cache of one row, copied for each; ``plen`` 0,
    ``prefix_cache`` None: no shared prefix; ``ids`` are the left-padded prompts), at most ``budget`` per
    row; with ``drafts`` (one per row, or None) and a ``planner``, verified in drafted passes.
    ``window``: the model's sliding window, if any. ``slots``: the most rows decoding at once (None:
    every row from the start); with fewer slots than rows, waiting rows join the batch as rows finish
    (continuous batching), so that a row finishing early frees its slot for the next."""
    n = ids.shape[0]
    decoder = _Decoder(model, ids, mask, budget=budget, eos=eos, watch=watch, drafts=drafts, planner=planner,
                       window=window, autocast=autocast)
    decoder.run(plen, prefix_cache, n if slots is None else max(1, min(int(slots), n)))
    return decoder.generated, decoder.counts


__all__ = ["DecodeCounts", "can_merge", "greedy_decode", "max_logit_positions", "refill_size", "sliding_window",
           "token_cost"]
