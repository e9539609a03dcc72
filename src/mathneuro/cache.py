"""On-disk cache of statistics, keyed by a hash of exactly what they depend on.

Key inputs: the model's identity (name, dtype, config, weight fingerprint), the sample
texts themselves (which pin data, template and drawn sample ids), ``max_length``, the
statistic kind and the scored module names. Nothing else — top-K, scalar, method and
batch size never change statistics, so every sweep point reuses them. Entries are one
``<key>.safetensors`` plus a ``<key>.json`` of metadata, written atomically.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from mathneuro.recording import atomic_write, write_json_atomic
from mathneuro.statistics import Statistics, collect_statistics

CACHE_VERSION = 1


def texts_hash(texts: Sequence[str]) -> str:
    """sha256 over the sample texts in order (length-prefixed, so boundaries count)."""
    h = hashlib.sha256()
    for text in texts:
        data = text.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def statistics_key(
    *,
    model_identity: dict,
    texts: Sequence[str],
    kind: str,
    max_length: int,
    modules: Sequence[str],
) -> str:
    """The cache key of one statistics entry (hex sha256)."""
    payload = {
        "version": CACHE_VERSION,
        "model": model_identity,
        "texts": texts_hash(texts),
        "num_texts": len(texts),
        "kind": kind,
        "max_length": int(max_length),
        "modules": sorted(modules),
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


class StatisticsCache:
    """Statistics by key, in memory and (when ``root`` is given) on disk."""

    def __init__(self, root: str | os.PathLike | None = None):
        self.root = Path(root) if root is not None else None
        self._memory: dict[str, Statistics] = {}
        self.hits = 0
        self.misses = 0
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)

    def load(self, key: str) -> Statistics | None:
        """The entry under ``key``, or None; a half-written entry counts as absent."""
        if key in self._memory:
            return self._memory[key]
        if self.root is None:
            return None
        tensors_path, meta_path = self.root / f"{key}.safetensors", self.root / f"{key}.json"
        if not (tensors_path.exists() and meta_path.exists()):
            return None
        try:
            meta = json.loads(meta_path.read_text())
            tensors = load_file(str(tensors_path))
        except (OSError, ValueError):
            return None
        stats = Statistics(meta["kind"], tensors, meta["num_samples"], meta["num_tokens"], meta.get("meta", {}))
        self._memory[key] = stats
        return stats

    def save(self, key: str, stats: Statistics) -> None:
        """Store ``stats`` under ``key`` (tensors first, metadata last, each atomically)."""
        self._memory[key] = stats
        if self.root is None:
            return
        tensors = {k: v.contiguous() for k, v in stats.tensors.items()}
        atomic_write(self.root / f"{key}.safetensors", lambda p: save_file(tensors, p))
        meta = {"kind": stats.kind, "num_samples": stats.num_samples, "num_tokens": stats.num_tokens,
                "meta": stats.meta}
        write_json_atomic(self.root / f"{key}.json", meta)


def cached_statistics(
    cache: StatisticsCache,
    model: torch.nn.Module,
    tokenizer,
    texts: Sequence[str],
    *,
    model_identity: dict,
    kinds: Sequence[str],
    targets: dict | None = None,
    activations: dict | None = None,
    max_length: int = 512,
    batch_size: int = 8,
    progress: bool = True,
    desc: str = "statistics",
) -> tuple[dict[str, Statistics], dict[str, str]]:
    """Statistics of each kind for ``texts``, from the cache when present; missing kinds are
    computed together in one forward pass and stored. Returns ``(stats by kind, keys by kind)``."""
    from mathneuro.targets import find_mlp_activations, find_target_linears

    modules_of = {}
    if "linear_inputs" in kinds:
        targets = targets if targets is not None else find_target_linears(model)
        modules_of["linear_inputs"] = list(targets)
    if "lape" in kinds:
        activations = activations if activations is not None else find_mlp_activations(model)
        modules_of["lape"] = list(activations)
    keys = {
        kind: statistics_key(model_identity=model_identity, texts=texts, kind=kind,
                             max_length=max_length, modules=modules_of[kind])
        for kind in kinds
    }
    found: dict[str, Statistics] = {}
    for kind, key in keys.items():
        stats = cache.load(key)
        if stats is not None:
            found[kind] = stats
            cache.hits += 1
    missing = [k for k in kinds if k not in found]
    if missing:
        cache.misses += len(missing)
        computed = collect_statistics(
            model, tokenizer, texts, kinds=missing, targets=targets, activations=activations,
            batch_size=batch_size, max_length=max_length, progress=progress, desc=desc,
        )
        for kind, stats in computed.items():
            stats.meta["key"] = keys[kind]
            cache.save(keys[kind], stats)
            found[kind] = stats
    return found, keys
