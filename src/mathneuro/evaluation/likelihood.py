"""Log-likelihoods of continuations and of whole texts, batched, on the model as it is now.

Sequences are left-padded with explicit position ids, so that the scored tokens are the last
positions of every row and only their logits are computed (``logits_to_keep``): large
vocabularies (Gemma's 262k) never materialise logits for the whole batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from mathneuro.evaluation.generation import encode, last_positions, model_device
from mathneuro.util.padding import left_padded, pad_token_id


def prefix_token_id(tokenizer) -> int:
    """The token that starts a text with no context: BOS if the tokenizer has one, else EOS."""
    for tid in (tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id):
        if tid is not None:
            return int(tid)
    raise ValueError("tokenizer has no bos, eos or pad token to start a text with")


def max_context(model: torch.nn.Module, default: int = 2048) -> int:
    """The longest sequence the model takes (``max_position_embeddings``), or ``default``."""
    return int(getattr(model.config, "max_position_embeddings", None) or default)


def _split_context(context: str, continuation: str) -> tuple[str, str]:
    # Trailing spaces of the context belong to the continuation (" Paris" is one token, "  Paris" is not).
    stripped = context.rstrip(" ")
    return stripped, context[len(stripped):] + continuation


def encode_pair(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    """Token ids of a (context, continuation) pair, the way lm-eval splits them."""
    context, continuation = _split_context(context, continuation)
    cont = encode(tokenizer, continuation, add_special_tokens=False)
    if context:
        ctx = encode(tokenizer, context, add_special_tokens=True)
    else:
        ctx = [prefix_token_id(tokenizer)]
    return ctx, cont


@torch.no_grad()
def score_token_sequences(
    model: torch.nn.Module,
    pairs: Sequence[tuple[list[int], list[int]]],
    *,
    batch_size: int = 8,
    pad_id: int = 0,
    progress: bool = False,
    desc: str = "loglikelihood",
) -> list[float]:
    """Sum of log-probabilities of each continuation given its context (token ids), in float32.

    Contexts longer than the model's window are cut from the left. Pairs are batched by length.
    """
    if not pairs:
        return []
    device = model_device(model)
    limit = max_context(model)
    seqs = []
    for ctx, cont in pairs:
        if not cont:
            raise ValueError("score_token_sequences: empty continuation")
        full = (ctx + cont)[-(limit + 1):]
        seqs.append((full[:-1], len(cont)))
    order = sorted(range(len(seqs)), key=lambda i: -len(seqs[i][0]))
    scores = [0.0] * len(seqs)
    bar = tqdm(total=len(seqs), desc=desc, disable=not progress, leave=False)
    for lo in range(0, len(order), batch_size):
        idx = order[lo: lo + batch_size]
        inputs = [seqs[i][0] for i in idx]
        n_cont = [min(seqs[i][1], len(seqs[i][0])) for i in idx]
        targets = [((pairs[i][0] + pairs[i][1])[-(limit + 1):])[-n:] for i, n in zip(idx, n_cont, strict=True)]
        keep = max(n_cont)
        ids, mask = left_padded(inputs, pad_id)
        width = ids.shape[1]
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                    use_cache=False, logits_to_keep=last_positions(keep, width, device))
        logprobs = F.log_softmax(out.logits[:, -keep:, :].float(), dim=-1)
        for j, (n, tgt) in enumerate(zip(n_cont, targets, strict=True)):
            rows = logprobs[j, keep - n:, :]
            tgt_t = torch.tensor(tgt, device=rows.device)
            scores[idx[j]] = float(rows.gather(-1, tgt_t[:, None]).sum())
        bar.update(len(idx))
    bar.close()
    return scores


def loglikelihoods(
    model: torch.nn.Module,
    tokenizer,
    requests: Sequence[tuple[str, str]],
    *,
    batch_size: int = 8,
    progress: bool = False,
    desc: str = "loglikelihood",
) -> list[float]:
    """log P(continuation | context) for each (context, continuation) pair of strings."""
    pairs = [encode_pair(tokenizer, c, x) for c, x in requests]
    return score_token_sequences(model, pairs, batch_size=batch_size, pad_id=pad_token_id(tokenizer),
                                 progress=progress, desc=desc)


def rolling_loglikelihoods(
    model: torch.nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    max_length: int = 512,
    batch_size: int = 8,
    progress: bool = False,
    desc: str = "perplexity",
) -> list[tuple[float, int]]:
    """(total log-likelihood, number of scored tokens) of every text, scored in disjoint windows.

    Each window holds up to ``max_length - 1`` tokens of the text, after the prefix token
    (BOS, else EOS), so every token of the text is scored once.
    """
    start = prefix_token_id(tokenizer)
    window = max(1, min(max_length, max_context(model)) - 1)
    pairs: list[tuple[list[int], list[int]]] = []
    owner: list[int] = []
    counts = [0] * len(texts)
    for t, text in enumerate(texts):
        ids = encode(tokenizer, text, add_special_tokens=False)
        counts[t] = len(ids)
        for lo in range(0, len(ids), window):
            pairs.append(([start], ids[lo: lo + window]))
            owner.append(t)
    scores = score_token_sequences(model, pairs, batch_size=batch_size, pad_id=pad_token_id(tokenizer),
                                   progress=progress, desc=desc)
    totals = [0.0] * len(texts)
    for t, s in zip(owner, scores, strict=True):
        totals[t] += s
    return list(zip(totals, counts, strict=True))
