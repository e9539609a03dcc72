"""Log-likelihoods of one-token continuations from each context's last position only.

MMLU-style tasks ask for the log-probability of one answer letter after a prompt. lm-eval's
``HFLM`` runs a right-padded batch of prompts and takes a log-softmax over the whole vocabulary
at every position of it: ``batch x length x vocabulary`` floats, several GB per batch for a
150 k-token vocabulary and prompts of a few hundred tokens, of which it reads one row per prompt.
:func:`score_last_tokens` runs the same prompts left-padded (attention mask and position ids
counting real tokens only, so every real token sees what it sees in ``HFLM``) and asks the model
for the last position's logits only. The result is lm-eval's ``(log-probability, is greedy)`` per
continuation, up to floating-point rounding. :class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM`
uses it for lm-eval's log-likelihood requests.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from mathneuro.evaluation.generation import last_logit_only


def one_token_groups(requests: Sequence, max_length: int) -> dict[tuple[int, ...], list[int]]:
    """``{context tokens: request indices}`` of lm-eval requests ``((ctx, cont), ctx_enc, cont_enc)`` whose
    continuation is one token and whose context is not truncated by ``max_length``."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for index, (_, context_enc, continuation_enc) in enumerate(requests):
        if len(continuation_enc) == 1 and 0 < len(context_enc) <= max_length:
            groups.setdefault(tuple(context_enc), []).append(index)
    return groups


def _left_padded(contexts: Sequence[Sequence[int]], pad_id: int, device: torch.device
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(ids, attention mask, position ids)`` of contexts left-padded to the longest."""
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(contexts), width), dtype=torch.long)
    for row, context in enumerate(contexts):
        ids[row, width - len(context):] = torch.tensor(context, dtype=torch.long)
        mask[row, width - len(context):] = 1
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    return ids.to(device), mask.to(device), positions.to(device)


@torch.no_grad()
def score_last_tokens(model: torch.nn.Module, groups: Sequence[tuple[Sequence[int], Sequence[int]]], *,
                      pad_id: int, batch_size: int, softmax_dtype: torch.dtype | None = None,
                      autocast: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
                      ) -> Iterator[tuple[int, list[tuple[float, bool]]]]:
    """For each ``(context, next tokens)`` group: ``(group index, [(log-probability, is greedy)
    of each next token after the context])``, batches of ``batch_size`` contexts, longest first.

    Yields as each batch ends, so a caller can report progress; groups come out of order."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    device = model.get_input_embeddings().weight.device
    order = sorted(range(len(groups)), key=lambda i: -len(groups[i][0]))
    for start in range(0, len(order), batch_size):
        batch = order[start: start + batch_size]
        ids, mask, positions = _left_padded([groups[i][0] for i in batch], pad_id, device)
        with autocast():
            logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                           **last_logit_only(model, ids.shape[1])).logits[:, -1, :]
        logp = F.log_softmax(logits, dim=-1, dtype=softmax_dtype)  # [batch, V]
        greedy = logp.argmax(dim=-1)
        for row, index in enumerate(batch):
            tokens = torch.tensor(list(groups[index][1]), dtype=torch.long, device=logp.device)
            values = logp[row].gather(0, tokens).tolist()
            flags = (tokens == greedy[row]).tolist()
            yield index, [(float(v), bool(f)) for v, f in zip(values, flags, strict=True)]


__all__ = ["one_token_groups", "score_last_tokens"]
