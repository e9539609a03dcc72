"""The batch journal: each generated batch kept on disk as it completes, so that a generation task cut short
resumes at the batch it was in, with the tokens an uninterrupted run generates.

A generation task is lm-eval's batches in a fixed order (its ``Collator``), decoded one after another
by :class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM`. Evaluation keeps finished
*tasks* (:class:`~mathneuro.evaluation.task_store.TaskStore`); a task of GSM8K or MATH takes an hour on a
CPU, and a timeout or a preemption inside it lost all of it. With a journal attached to the model
(:func:`journaling`), the wrapper writes each batch's output token ids as the batch completes, with the
state that batch leaves to the next one: the drafting planner's acceptance counts and the shared-prefix
cache (the tokens it was computed from, and the ones it holds after cropping). Both change the next
batch's numbers in bf16, so a later attempt answers every recorded batch from the journal and, at the
first batch it must compute, rebuilds that state first: its tokens are those of an uninterrupted run.

Entries are keyed by content (the batch's context tokens and attention mask, ``max_length``, the stop
strings and the generation settings); the folder scopes them to one model, eval config and edit (the
runner puts the journal inside the task store's folder, removed with it once the evaluation is recorded).
An entry that cannot be read, or does not match its checksum, is a miss (one warning) and the batch is
decoded again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from mathneuro.util.attached import PerModel
from mathneuro.util.io import write_json_atomic

log = logging.getLogger("mathneuro")

JOURNAL_VERSION = 1
JOURNAL_DIR = "batches"  # the journal's folder inside a task store's folder
_JOURNALS: PerModel[BatchJournal] = PerModel()


def _tensor_digest(h: Any, tensor: torch.Tensor | None) -> None:
    if tensor is None:
        h.update(b"none")
        return
    t = tensor.detach().to("cpu", torch.long).contiguous()
    h.update(json.dumps(list(t.shape)).encode())
    h.update(t.numpy().tobytes())


class BatchJournal:
    """Generated batches (token ids and the decoding state after them) under ``folder``, one JSON file each."""

    def __init__(self, folder: str | Path, machine: str = "") -> None:
        self.folder = Path(folder)
        self.machine = machine  # the kind of machine decoding now, written into each entry
        self.reused = 0  # batches answered from the journal by this object
        self.written = 0
        self.elsewhere: dict[str, int] = {}  # batches read back that another kind of machine decoded, by machine

    def key(self, context: torch.Tensor, mask: torch.Tensor | None, max_length: int, stop: Sequence[str],
            settings: Mapping[str, Any]) -> str | None:
        """The content key of one batch, or None when its settings cannot be written down (then it is not kept)."""
        try:
            text = json.dumps({"version": JOURNAL_VERSION, "max_length": int(max_length), "stop": list(stop),
                               "settings": dict(settings)}, sort_keys=True)
        except (TypeError, ValueError):  # a logits processor or another object: no stable key
            return None
        h = hashlib.sha256(text.encode())
        _tensor_digest(h, context)
        _tensor_digest(h, mask)
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.folder / f"{key[:40]}.json"

    def get(self, key: str) -> tuple[torch.Tensor, dict[str, Any]] | None:
        """The kept output of the batch under ``key`` and the state it left, or None."""
        path = self._path(key)
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            if data.get("version") != JOURNAL_VERSION or data.get("key") != key:
                raise ValueError("it is another batch's entry or another version's")
            tokens, shape = data["tokens"], data["shape"]
            if hashlib.sha256(json.dumps([shape, tokens]).encode()).hexdigest() != data.get("sha256"):
                raise ValueError("its tokens do not match their checksum")
            out = torch.tensor(tokens, dtype=torch.long).reshape(shape)
            state = data.get("state") or {}
            there = str(data.get("machine") or "")
        except Exception as exc:  # noqa: BLE001 - truncated or foreign: decode the batch again
            reason = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("batch journal: entry %s is damaged or does not match (%s); decoding that batch again",
                        path, reason)
            return None
        self.reused += 1
        if there != self.machine:
            key_ = there or "an unrecorded machine"
            self.elsewhere[key_] = self.elsewhere.get(key_, 0) + 1
        return out, state

    def put(self, key: str, output: torch.Tensor, state: Mapping[str, Any]) -> None:
        """Keep one batch's output token ids and the decoding state it leaves (atomically)."""
        t = output.detach().to("cpu", torch.long)
        shape, tokens = list(t.shape), t.reshape(-1).tolist()
        self.folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self._path(key), {"version": JOURNAL_VERSION, "key": key, "shape": shape, "tokens": tokens,
                                            "sha256": hashlib.sha256(json.dumps([shape, tokens]).encode()).hexdigest(),
                                            "state": dict(state), "machine": self.machine})
        self.written += 1


def attach_batch_journal(model: torch.nn.Module, journal: BatchJournal | None) -> None:
    """Make ``journal`` the batch journal of ``model`` (None: none) for every wrapper of that model object, for as
    long as the model lives (the ``mathneuro-hf`` backend's ``journal=`` option; :func:`journaling` for a block)."""
    _JOURNALS.attach(model, journal)


def batch_journal_of(model: torch.nn.Module) -> BatchJournal | None:
    """The journal attached to ``model``, if any."""
    return _JOURNALS.of(model)


@contextlib.contextmanager
def journaling(model: torch.nn.Module, folder: str | Path | None, machine: str = "") -> Iterator[BatchJournal | None]:
    """Within: every ``PrefixCacheHFLM`` wrapping ``model`` keeps its generated batches under ``folder``
    (None: no journal) and answers the batches kept there by an earlier attempt; ``machine`` (the kind of
    machine decoding, ``machine_kind``) is written into each entry, and batches read back from another
    kind are counted in the journal's ``elsewhere``."""
    if folder is None:
        yield None
        return
    previous = _JOURNALS.of(model)
    journal = BatchJournal(folder, machine)
    _JOURNALS.attach(model, journal)
    try:
        yield journal
    finally:
        _JOURNALS.attach(model, previous)


__all__ = ["JOURNAL_DIR", "BatchJournal", "attach_batch_journal", "batch_journal_of", "journaling"]
