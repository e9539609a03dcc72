"""Log-likelihoods of several continuations of one context, the context run once.

The choices of a multiple-choice question share its context (RACE: a ~1,000-token article and
question); lm-eval's ``HFLM`` runs the context once per choice. :func:`score_shared_context` runs
it once, then every continuation but its last token in one batch that continues from the
context's KV cache expanded to the choices (right-padded, positions continuing from the context).
The result is lm-eval's ``(log-probability, is greedy)`` per continuation, up to floating-point
rounding. :class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM` uses it for lm-eval's
log-likelihood requests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from mathneuro.evaluation.generation import cache_kwarg, last_logit_only, returned_cache


def shared_context_groups(requests: Sequence, min_tokens: int, max_length: int) -> dict[tuple[int, ...], list[int]]:
    """``{context tokens: request indices}`` of lm-eval requests ``((ctx, cont), ctx_enc, cont_enc)`` worth
    sharing: a context of at least ``min_tokens`` tokens shared by two or more requests, not all of
    them one token long (lm-eval's logits cache serves those), none truncated by ``max_length``."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, (_, context_enc, _) in enumerate(requests):
        groups.setdefault(tuple(context_enc), []).append(index)
    return {context: members for context, members in groups.items()
            if len(members) >= 2 and len(context) >= min_tokens
            and any(len(requests[i][2]) > 1 for i in members)
            and all(len(context) + len(requests[i][2]) <= max_length + 1 for i in members)}


@torch.no_grad()
def score_shared_context(model: torch.nn.Module, context: list[int], continuations: list[list[int]], *,
                         pad_id: int, softmax_dtype: torch.dtype | None = None,
                         autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
                         ) -> list[tuple[float, bool]] | None:
    """``(log-probability, is greedy)`` of each continuation after ``context``; None when the model
    returns no cache that can be expanded to the continuations."""
    device = model.get_input_embeddings().weight.device
    ids = torch.tensor([context], dtype=torch.long, device=device)
    with autocast():
        out = model(input_ids=ids, use_cache=True, **last_logit_only(model, ids.shape[1]))
    cache = returned_cache(out)
    if cache is None or not hasattr(cache, "batch_repeat_interleave"):
        return None
    first = F.log_softmax(out.logits[:, -1:, :], dim=-1, dtype=softmax_dtype)  # [1, 1, V]
    n, c = len(continuations), len(context)
    width = max(len(t) for t in continuations) - 1
    rest = None
    if width > 0:
        cache.batch_repeat_interleave(n)
        tail = torch.full((n, width), pad_id, dtype=torch.long, device=device)
        mask = torch.zeros((n, c + width), dtype=torch.long, device=device)
        mask[:, :c] = 1
        for row, cont in enumerate(continuations):
            tail[row, : len(cont) - 1] = torch.tensor(cont[:-1], dtype=torch.long, device=device)
            mask[row, c: c + len(cont) - 1] = 1
        positions = torch.arange(c, c + width, device=device).expand(n, width)
        with autocast():
            logits = model(input_ids=tail, attention_mask=mask, position_ids=positions,
                           **{cache_kwarg(model): cache}, use_cache=False).logits
        rest = F.log_softmax(logits, dim=-1, dtype=softmax_dtype)  # [n, width, V]
    answers = []
    for row, cont in enumerate(continuations):
        logp = first[0] if len(cont) == 1 else torch.cat([first[0], rest[row, : len(cont) - 1]], dim=0)
        target = torch.tensor(cont, dtype=torch.long, device=logp.device)
        greedy = bool((logp.argmax(dim=-1) == target).all())
        answers.append((float(logp.gather(1, target[:, None]).sum()), greedy))
    return answers


__all__ = ["score_shared_context", "shared_context_groups"]
