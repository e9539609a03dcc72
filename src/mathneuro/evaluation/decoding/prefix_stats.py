"""``PrefixStats``: the counts of what the prefix cache and the greedy loop did in one lm-eval call."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefixStats:
    """What the prefix cache did during the last ``generate_until`` call."""

    batches: int = 0  # batches lm-eval formed
    cached_batches: int = 0  # ... that continued from a shared-prefix cache
    prefix_computations: int = 0  # prefix forward passes (once per distinct prefix, not per batch)
    prefix_tokens_skipped: int = 0  # prompt tokens not recomputed: sum over cached batches of (rows - 1) * P
    greedy_batches: int = 0  # batches decoded by the row-dropping greedy loop (others: model.generate)
    shared_contexts: int = 0  # log-likelihood: contexts run once for all of their (multi-token) continuations
    context_tokens_skipped: int = 0  # log-likelihood: context tokens not recomputed, sum of (requests - 1) * C
    last_token_contexts: int = 0  # log-likelihood: distinct contexts of one-token requests, last position only
    last_token_requests: int = 0  # ... and the one-token requests they answered
    greedy_passes: int = 0  # model passes of the greedy loop (one per generated token without drafts)
    drafted_rows: int = 0  # greedy rows decoded with a draft (the unedited model's answer)
    lookup_rows: int = 0  # greedy rows without one, drafted by lookup in their prompt and own tokens
    tokens_drafted: int = 0  # draft tokens fed to be verified
    tokens_accepted: int = 0  # ... that were the model's own greedy tokens
    rows_joined: int = 0  # greedy rows that joined rows already decoding, in a slot another row freed
