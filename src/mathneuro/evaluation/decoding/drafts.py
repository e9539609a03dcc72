"""The draft store: the unedited model's generated tokens per request, the drafts of drafted decoding.

Every point of a sweep generates answers to the requests the unedited model (the baseline) has
already answered. :class:`DraftStore` keeps those answers, token ids per request, keyed by content:
the model's identity (and the tokens its generation stops at), the request's context tokens and
its generation settings (stop strings, ``max_gen_toks``). The runner's workbench keeps one store
per loaded model under ``<cache>/baselines/drafts/<model key>/``, beside the baseline's cached
metrics, so that later points and other processes sharing the cache reuse them:

- while the baseline is evaluated the store *records* (:meth:`DraftStore.recording`): every greedy
  generation of :class:`~mathneuro.evaluation.decoding.prefix_cache.PrefixCacheHFLM` is written, one JSON
  entry per request (tokens plus their sha256, written atomically);
- at every later evaluation of the (edited) model the wrapper looks its requests up and drafts
  from what it finds (``eval.draft=baseline``, the default; ``none`` turns drafting off).

An entry that cannot be read, is not the request's or whose tokens do not match their checksum is
a miss, with one warning per entry. A baseline cached before drafts existed carries no ``drafts``
record: :func:`baseline_needs_drafts` tells the workbench to evaluate it again once, recording.

:func:`attach_draft_store` ties a store to a model object; every ``PrefixCacheHFLM`` wrapping that
model (the harness's, ``gsm8k_gen``'s) finds it there. ``DraftStore.counts`` adds up what drafting
did (requests, tokens drafted and accepted, passes); the runner records a point's share in
``results.json`` (``drafting``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from mathneuro.evaluation.task_table import TASKS
from mathneuro.util.attached import PerModel
from mathneuro.util.io import write_json_atomic

log = logging.getLogger("mathneuro")

DRAFT_MODES = ("baseline", "none")
STORE_VERSION = 1
_STORES: PerModel[DraftStore] = PerModel()


@dataclass
class DraftCounts:
    """What greedy decoding did with drafts: requests decoded (and those that had a draft), tokens
    generated, drafted (fed to be verified) and accepted, model passes."""

    requests: int = 0
    requests_drafted: int = 0
    tokens_generated: int = 0
    tokens_drafted: int = 0
    tokens_accepted: int = 0
    passes: int = 0

    def add(self, other: DraftCounts) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def since(self, earlier: DraftCounts) -> DraftCounts:
        """The counts added after ``earlier`` (a copy taken before)."""
        return DraftCounts(**{f.name: getattr(self, f.name) - getattr(earlier, f.name)
                              for f in dataclasses.fields(self)})

    def copy(self) -> DraftCounts:
        return dataclasses.replace(self)

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


def draft_settings(stop: Sequence[str], budget: int, eos: Sequence[int] | set[int]) -> dict[str, Any]:
    """The generation settings a draft is keyed by: stop strings, tokens to generate, the model's EOS ids."""
    return {"until": list(stop), "max_gen_toks": int(budget), "eos": sorted(int(t) for t in eos)}


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def request_key(model_key: str, context: Sequence[int], settings: Mapping[str, Any]) -> str:
    """The content key of one request's draft: model, context tokens and generation settings."""
    return _digest({"version": STORE_VERSION, "model": model_key, "context": [int(t) for t in context],
                    "settings": dict(settings)})


class DraftStore:
    """Generated token ids of the unedited model per request: in memory and, with a ``root``, on disk.

    ``model``: what identifies the unedited model (the workbench passes its identity and the
    tokens its generation stops at); ``vocab_size``: token ids at or above it are damage.
    """

    def __init__(self, root: str | Path | None, model: Any, vocab_size: int | None = None) -> None:
        self.model_key = _digest(model)[:16]
        self.root = Path(root) / self.model_key if root is not None else None
        self.vocab_size = vocab_size
        self.recording_on = False
        self.recorded = 0  # entries written while recording (this process)
        self.counts = DraftCounts()
        self._memory: dict[str, list[int]] = {}
        self._warned: set[str] = set()

    def _path(self, key: str) -> Path | None:
        return self.root / key[:2] / f"{key}.json" if self.root is not None else None

    def key(self, context: Sequence[int], settings: Mapping[str, Any]) -> str:
        """The key of a request's entry (:func:`request_key` under this store's model)."""
        return request_key(self.model_key, context, settings)

    def keys(self) -> list[str]:
        """The keys of the entries read or written through this store object, in that order."""
        return list(self._memory)

    def get(self, context: Sequence[int], settings: Mapping[str, Any]) -> list[int] | None:
        """The recorded tokens of this request, or None (never recorded, or a damaged entry: one warning)."""
        return self.get_key(self.key(context, settings))

    def get_key(self, key: str) -> list[int] | None:
        """The tokens under ``key`` (memory, then disk), or None."""
        if key in self._memory:
            return self._memory[key]
        path = self._path(key)
        if path is None or not path.exists():
            return None
        try:
            tokens = self._read(path, key)
        except Exception as exc:  # noqa: BLE001 - unreadable, truncated or foreign: a miss
            if key not in self._warned:
                self._warned.add(key)
                reason = " ".join(str(exc).split()) or type(exc).__name__
                log.warning("drafts cache: entry %s is damaged or does not match (%s); decoding without it", path,
                            reason)
            return None
        self._memory[key] = tokens
        return tokens

    def _read(self, path: Path, key: str) -> list[int]:
        data = json.loads(path.read_text())
        if data.get("version") != STORE_VERSION or data.get("key") != key:
            raise ValueError("it is another request's entry or another version's")
        tokens = data["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, int) and t >= 0 for t in tokens):
            raise ValueError("its tokens are not token ids")
        if self.vocab_size is not None and any(t >= self.vocab_size for t in tokens):
            raise ValueError(f"a token id is outside the vocabulary ({self.vocab_size})")
        if data.get("sha256") != _digest(tokens):
            raise ValueError("its tokens do not match their checksum")
        return tokens

    def put(self, context: Sequence[int], settings: Mapping[str, Any], tokens: Sequence[int]) -> None:
        """Keep ``tokens`` as this request's draft (memory, and disk when the store has a root)."""
        self.put_key(self.key(context, settings), tokens)

    def put_key(self, key: str, tokens: Sequence[int]) -> None:
        """Keep ``tokens`` under ``key``."""
        tokens = [int(t) for t in tokens]
        self._memory[key] = tokens
        self._warned.discard(key)
        path = self._path(key)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {"version": STORE_VERSION, "key": key, "tokens": tokens, "sha256": _digest(tokens)})
        self.recorded += 1

    @contextlib.contextmanager
    def recording(self) -> Iterator[DraftStore]:
        """Within: greedy generations of the model this store is attached to are recorded (its baseline)."""
        previous, self.recording_on = self.recording_on, True
        try:
            yield self
        finally:
            self.recording_on = previous


def attach_draft_store(model: torch.nn.Module, store: DraftStore | None) -> None:
    """Make ``store`` the draft store of ``model`` (None: none) for every wrapper of that model object."""
    _STORES.attach(model, store)


def draft_store_of(model: torch.nn.Module) -> DraftStore | None:
    """The draft store attached to ``model``, if any."""
    return _STORES.of(model)


def may_generate(eval_cfg: Any) -> bool:
    """Whether drafting is on for ``eval_cfg`` and one of its tasks may decode greedily through the harness."""
    if getattr(eval_cfg, "draft", "none") != "baseline" or not getattr(eval_cfg, "prefix_cache", False):
        return False
    # a task outside the table (a user's YAML) may generate
    return any(TASKS[t].generates if t in TASKS else True for t in eval_cfg.tasks)


def baseline_needs_drafts(eval_cfg: Any, entry: Path) -> bool:
    """Whether the cached baseline ``entry`` was written before drafts were recorded with it, and
    ``eval_cfg`` would draft: then the unedited model is evaluated again once, recording them."""
    if not may_generate(eval_cfg):
        return False
    try:
        recorded = "drafts" in json.loads(entry.read_text())
    except (OSError, ValueError):
        return False  # a damaged entry: the baseline cache's own check recomputes it
    if not recorded:
        log.info("baseline cache: %s holds no drafts (written before drafted decoding); evaluating the "
                 "unedited model again to record them", entry)
    return not recorded


__all__ = ["DRAFT_MODES", "DraftCounts", "DraftStore", "attach_draft_store", "baseline_needs_drafts", "draft_settings",
           "draft_store_of", "may_generate", "request_key"]
