"""Batches of token-id rows: right padding (statistics), left padding (scoring, generation), the pad id."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_token_id(tokenizer) -> int:
    """The id to pad with: the tokenizer's pad token, else its eos, else its bos, else 0.

    Padded positions are masked out everywhere, so any id works; a real token keeps embeddings in range.
    """
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id):
        if tid is not None:
            return int(tid)
    return 0


def right_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token-id rows, right-padded to the longest row."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, : len(row)] = torch.tensor(row)
        attn[i, : len(row)] = 1
    return input_ids, attn


def without_pad_columns(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, mask)`` of left-padded rows without the leading columns that are padding in every row (a few
    rows taken from a wider batch: as if padded on their own)."""
    used = mask.any(dim=0).nonzero()
    first = int(used[0]) if used.numel() else 0
    return ids[:, first:], mask[:, first:]


def left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask)`` of token-id rows, left-padded so every row ends in the last column."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        input_ids[i, width - len(row):] = torch.tensor(row)
        attn[i, width - len(row):] = 1
    return input_ids, attn
