"""Drafts from recorded answers: fill a draft store from the unedited model's per-example records.

The draft store (:mod:`~mathneuro.evaluation.decoding.drafts`) is a cache under ``<cache>/baselines/drafts``:
a fresh machine, a new ``cache_dir`` or a results folder moved elsewhere starts without it, though the
unedited model's per-example records (``<task>.jsonl``, each answer's ``response`` and ``prompt_hash``)
travel with the results. Evaluating the baseline again to get its drafts back costs hours on a CPU.

:func:`seed_drafts` replays those answers instead: it runs the task through lm-eval's own
``generate_until`` with the model call replaced by the recorded answer of each request (matched by the
sha256 of its prompt, lm-eval's ``prompt_hash``). So every entry is keyed exactly as a later greedy
decoding looks it up (context tokens after lm-eval's encoding and truncation, stop strings,
``max_gen_toks``, the model's EOS ids), and no model pass runs. The task's metrics, scored on the
replayed answers, come back too: equal to the recorded ones when records and task agree.

A draft is only a proposal that the edited model verifies: a recorded text whose tokens differ from
those the model generated (the answer is re-tokenised, and cut where a stop string began) costs
acceptance, never exactness.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mathneuro.evaluation.decoding.drafts import DraftStore, draft_settings
from mathneuro.evaluation.decoding.greedy_search import is_plain_greedy
from mathneuro.evaluation.generation import generation_eos_ids
from mathneuro.evaluation.samples import hash_text, read_records
from mathneuro.util.padding import pad_token_id, right_padded

log = logging.getLogger("mathneuro")


@dataclass
class SeedCounts:
    """What a replay did: generation requests seen, those with a recorded answer, entries written and
    entries the store already held (greedy requests only: the store drafts nothing else)."""

    requests: int = 0
    answered: int = 0
    written: int = 0
    present: int = 0
    metrics: dict[str, float] = field(default_factory=dict)  # the task scored on the replayed answers

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "answered": self.answered, "written": self.written,
                "present": self.present}


def recorded_answers(folder: str | Path) -> dict[str, str]:
    """``{prompt_hash: response}`` of every generated answer in the records (``*.jsonl``) of ``folder``."""
    answers: dict[str, str] = {}
    paths = sorted(Path(folder).glob("*.jsonl"))
    if not paths:
        raise FileNotFoundError(f"no per-example records (*.jsonl) in {folder}")
    for path in paths:
        for record in read_records(path):
            prompt, response = record.get("prompt_hash"), record.get("response")
            if isinstance(prompt, str) and isinstance(response, str):
                answers.setdefault(prompt, response)
    return answers


@contextlib.contextmanager
def replaying(lm: Any, answers: Mapping[str, str], store: DraftStore, counts: SeedCounts) -> Iterator[None]:
    """Within: ``lm`` (lm-eval's HFLM or our wrapper) answers each generation request with its recorded
    answer and writes it to ``store`` as that request's draft; likelihood requests get placeholders
    (no model pass runs at all)."""
    by_row: dict[tuple[int, ...], list[int]] = {}
    eos = generation_eos_ids(lm.model)
    original_until = lm.generate_until

    def generate_until(requests, disable_tqdm: bool = False) -> list[str]:
        for request in requests:
            answer = answers.get(hash_text(request.args[0]))
            if answer is not None:
                ids, mask = lm.tok_batch_encode([request.args[0]])
                by_row[tuple(ids[0][mask[0].bool()].tolist())] = lm.tok_encode(answer, add_special_tokens=False)
        return original_until(requests, disable_tqdm=disable_tqdm)

    def answer_of(row: list[int]) -> list[int]:
        found = by_row.get(tuple(row))
        if found is None:  # lm-eval cut the context from the left: the row is a recorded context's tail
            found = next((a for ctx, a in by_row.items() if len(ctx) > len(row) and list(ctx[-len(row):]) == row), [])
        return found

    def model_generate(context: torch.Tensor, max_length: int, stop: list[str], **kwargs: Any) -> torch.Tensor:
        mask = kwargs.get("attention_mask")
        rest = {k: v for k, v in kwargs.items() if k != "attention_mask"}
        greedy = is_plain_greedy(lm.model, rest, getattr(lm, "think_end_token", None))
        budget = max(0, max_length - context.shape[1])
        settings = draft_settings(stop, budget, eos)
        generated = []
        for i in range(context.shape[0]):
            row = (context[i][mask[i].bool()] if mask is not None else context[i]).tolist()
            tokens = answer_of(row)[:budget]
            counts.requests += 1
            if tokens:
                counts.answered += 1
                if greedy:
                    key = store.key(row, settings)
                    if store.get_key(key) is not None:
                        counts.present += 1
                    else:
                        store.put_key(key, tokens)
                        counts.written += 1
            generated.append(tokens)
        out, _ = right_padded(generated, pad_token_id(lm.tokenizer))
        return torch.cat([context, out.to(device=context.device, dtype=context.dtype)], dim=1)

    patched = {"generate_until": generate_until, "_model_generate": model_generate,
               "loglikelihood": lambda requests, disable_tqdm=False: [(0.0, False)] * len(requests),
               "loglikelihood_rolling": lambda requests, disable_tqdm=False: [0.0] * len(requests)}
    for name, fn in patched.items():
        setattr(lm, name, fn)  # on this object only: its class, and every other wrapper, stay as they are
    try:
        yield
    finally:
        for name in patched:
            delattr(lm, name)


def seed_drafts(harness: Any, task: str, records: str | Path, store: DraftStore) -> SeedCounts:
    """Write the recorded answers of ``task`` (the per-example records in the folder ``records``) into
    ``store`` as the drafts of its requests, through ``harness`` (a
    :class:`~mathneuro.evaluation.harness.Harness` of the unedited model with the eval config the records
    were made under). Returns what it did, with the task's metrics on the replayed answers."""
    answers = recorded_answers(records)
    counts = SeedCounts()
    with replaying(harness.lm, answers, store, counts):
        counts.metrics = dict(harness.run(task).metrics)
    log.info("drafts of %s from %s: %d of %d requests answered, %d written, %d already held", task, records,
             counts.answered, counts.requests, counts.written, counts.present)
    return counts


__all__ = ["SeedCounts", "recorded_answers", "replaying", "seed_drafts"]
