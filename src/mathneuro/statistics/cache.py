"""On-disk cache of statistics, keyed by a hash of exactly what they depend on.

Key inputs: the model's identity (name, dtype, config, weight fingerprint), the sample
texts themselves (which pin data, template and drawn sample ids), ``max_length``, the
statistic kind and the scored module names. Nothing else — top-K, scalar, method and
batch size never change statistics, so every sweep point reuses them. Entries are one
``<key>.safetensors`` plus a ``<key>.json`` of metadata (written last, with the tensor file's
sha256 and every tensor's shape). An entry that cannot be stored (disk full, read-only, no
permission) is kept in memory with a one-line warning: the point goes on. What is read is verified: an entry that cannot
be read or does not match its metadata or the request (modules, sample count) is a miss, with a
one-line warning, and is recomputed and rewritten.

Computing an entry holds ``locks/<key>.lock`` (:class:`mathneuro.util.locking.FileLock`), so
concurrent jobs — other processes, or other machines sharing the cache directory — wait for
the one computing it and then read it from disk instead of repeating the forward passes.
Every lookup reports where the entry came from: ``memory``, ``disk``, ``computed`` or
``waited`` (another job computed it while this one waited for the lock).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from mathneuro.statistics.checkpoint import DEFAULT_EVERY_S, PassCheckpoint
from mathneuro.statistics.kinds import hooked_modules, kind_names
from mathneuro.statistics.passes import Statistics, collect_statistics
from mathneuro.util.io import atomic_write, remove_orphaned_temps, write_json_atomic
from mathneuro.util.locking import FileLock

CACHE_VERSION = 1
SOURCES = ("memory", "disk", "computed", "waited")

log = logging.getLogger("mathneuro")


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's bytes (read in 1 MiB blocks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def entry_problem(stats: Statistics, meta: dict, *, kind: str | None = None, modules=None,
                  num_samples: int | None = None) -> str | None:
    """Why a read entry cannot be trusted (metadata vs tensors vs the request), or None."""
    if kind is not None and stats.kind != kind:
        return f"kind {stats.kind!r}, expected {kind!r}"
    shapes = meta.get("shapes")
    if shapes is not None:
        if set(shapes) != set(stats.tensors):
            return "its tensor names differ from its metadata"
        bad = next((n for n, t in stats.tensors.items() if list(t.shape) != list(shapes[n])), None)
        if bad is not None:
            return f"tensor {bad!r} has shape {list(stats.tensors[bad].shape)}, metadata says {shapes[bad]}"
    if modules is not None and set(stats.modules()) != set(modules):
        return "it covers other modules than this model's targets"
    if num_samples is not None and stats.num_samples != num_samples:
        return f"{stats.num_samples} samples, expected {num_samples}"
    if not stats.tensors:
        return "it holds no tensors"
    return None


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

    def __init__(self, root: str | os.PathLike | None = None, *, lock_stale_after: float = 300.0):
        self.root = Path(root) if root is not None else None
        self.lock_stale_after = lock_stale_after  # seconds without a heartbeat before a lock counts as stale
        self._memory: dict[str, Statistics] = {}
        self.hits = 0
        self.misses = 0
        if self.root is not None:
            self.root.mkdir(parents=True, exist_ok=True)

    def load(self, key: str, *, kind: str | None = None, modules=None,
             num_samples: int | None = None) -> Statistics | None:
        """The entry under ``key``, or None. A half-written, unreadable or inconsistent entry (checked
        against its metadata and, when given, the expected kind, modules and sample count) is a miss,
        with a one-line warning; recomputing the statistics rewrites it."""
        if key in self._memory:
            return self._memory[key]
        if self.root is None:
            return None
        tensors_path, meta_path = self.root / f"{key}.safetensors", self.root / f"{key}.json"
        if not (tensors_path.exists() or meta_path.exists()):
            return None
        try:
            if not (tensors_path.exists() and meta_path.exists()):
                raise ValueError(f"only its {'metadata' if meta_path.exists() else 'tensor file'} exists")
            meta = json.loads(meta_path.read_text())
            if meta.get("sha256") and file_sha256(tensors_path) != meta["sha256"]:
                raise ValueError("the tensor file does not match the checksum in its metadata")
            tensors = load_file(str(tensors_path))
            stats = Statistics(meta["kind"], tensors, int(meta["num_samples"]), int(meta["num_tokens"]),
                               meta.get("meta", {}))
            problem = entry_problem(stats, meta, kind=kind, modules=modules, num_samples=num_samples)
            if problem:
                raise ValueError(problem)
        except Exception as exc:  # noqa: BLE001 - SafetensorError, JSON, key and type errors alike: a miss
            reason = " ".join(str(exc).split()) or type(exc).__name__
            log.warning("statistics cache: entry %s is damaged or incomplete (%s); recomputing and rewriting it",
                        tensors_path, reason)
            return None
        self._memory[key] = stats
        return stats

    def save(self, key: str, stats: Statistics) -> None:
        """Store ``stats`` under ``key``: tensors first, then the metadata that vouches for them (their
        sha256 and shapes), each atomically; if the metadata cannot be written the tensors go too. The caller
        holds the key's lock, so temp files of the entry's name are a killed writer's: they are removed."""
        self._memory[key] = stats
        if self.root is None:
            return
        tensors = {k: v.contiguous() for k, v in stats.tensors.items()}
        tensors_path = self.root / f"{key}.safetensors"
        try:
            atomic_write(tensors_path, lambda p: save_file(tensors, p))
            try:
                meta = {"kind": stats.kind, "num_samples": stats.num_samples, "num_tokens": stats.num_tokens,
                        "meta": stats.meta, "sha256": file_sha256(tensors_path),
                        "shapes": {k: list(v.shape) for k, v in tensors.items()}}
                write_json_atomic(self.root / f"{key}.json", meta)
            except BaseException:  # interrupted or failed: no entry rather than half of one
                tensors_path.unlink(missing_ok=True)
                raise
        except OSError as exc:  # disk full, read-only, no permission: the statistics are in memory; go on
            log.warning("statistics cache: cannot store %s (%s: %s); going on without storing it", key,
                        exc.filename, exc.strerror or exc)
            return
        for path in (tensors_path, self.root / f"{key}.json"):  # the caller holds the key's lock
            remove_orphaned_temps(path)

    def checkpoint(self, keys: Sequence[str], batch_size: int,
                   every_s: float = DEFAULT_EVERY_S) -> PassCheckpoint | None:
        """The checkpoint of the pass computing the entries ``keys`` together in batches of ``batch_size``
        (``partial/<hash>.safetensors``; None without a disk cache). Only the holder of the entries'
        locks writes it; it is deleted once they are stored."""
        if self.root is None:
            return None
        identity = {"keys": sorted(keys), "batch_size": int(batch_size), "cache_version": CACHE_VERSION}
        name = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
        return PassCheckpoint(self.root / "partial" / f"{name}.safetensors", identity, every_s)

    def in_memory(self, key: str) -> bool:
        """Whether ``key`` is held in this process's memory."""
        return key in self._memory

    def lock(self, key: str) -> FileLock | None:
        """The cross-process lock guarding the computation of ``key`` (None without a disk cache)."""
        if self.root is None:
            return None
        return FileLock(self.root / "locks" / f"{key}.lock", stale_after=self.lock_stale_after)



def _look_up(cache: StatisticsCache, keys: dict[str, str], modules_of: dict[str, list[str]], num_samples: int,
             found: dict[str, Statistics], source: dict[str, str], missing_source: str) -> None:
    """Fills ``found`` and ``source`` with the kinds not yet in ``found`` that ``cache`` holds (``missing_source``:
    the source of those not in memory)."""
    for kind, key in keys.items():
        if kind in found:
            continue
        in_memory = cache.in_memory(key)
        stats = cache.load(key, kind=kind, modules=modules_of[kind], num_samples=num_samples)
        if stats is not None:
            found[kind] = stats
            source[kind] = "memory" if in_memory else missing_source
            cache.hits += 1


def _acquire(locks: list[FileLock]) -> None:
    """Acquires ``locks`` in their order, so two jobs never hold one each of two keys; a lock whose file cannot
    be created is left out of ``locks`` (the computation goes on without it)."""
    for lock in list(locks):
        try:
            lock.acquire()
        except OSError as exc:  # cannot even create a lock file there: compute without it
            log.warning("statistics cache: cannot lock %s (%s); computing without the lock", exc.filename,
                        exc.strerror or exc)
            locks.remove(lock)


def _store(cache: StatisticsCache, computed: dict[str, Statistics], keys: dict[str, str],
           checkpoint: PassCheckpoint | None, found: dict[str, Statistics], source: dict[str, str],
           resumed: dict[str, int] | None) -> None:
    """Stores the ``computed`` statistics under their ``keys`` and adds them to ``found`` and ``source`` (and to
    ``resumed``, the batches they took from ``checkpoint``), then deletes the pass's checkpoint."""
    for kind, stats in computed.items():
        stats.meta["key"] = keys[kind]
        cache.save(keys[kind], stats)
        found[kind] = stats
        source[kind] = "computed"
        if checkpoint is not None and checkpoint.resumed_from and resumed is not None:
            resumed[kind] = checkpoint.resumed_from
    if checkpoint is not None:
        checkpoint.clear()


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
    sources: dict[str, str] | None = None,
    checkpoint_every_s: float = DEFAULT_EVERY_S,
    resumed: dict[str, int] | None = None,
) -> tuple[dict[str, Statistics], dict[str, str]]:
    """Statistics of each kind for ``texts``, from the cache when present; missing kinds are
    computed together in one forward pass and stored, under the cache's lock of each missing key
    (a job that finds a key locked waits, then reads it from disk). Returns ``(stats by kind,
    keys by kind)``; ``sources``, when given, is filled with each kind's source (:data:`SOURCES`).
    The pass checkpoints its progress every ``checkpoint_every_s`` seconds (:meth:`StatisticsCache.checkpoint`)
    and a pass cut short resumes from there; ``resumed``, when given, gets the batches each computed
    kind took from a checkpoint (kinds started from scratch are absent)."""
    kinds = list(kind_names(kinds))
    modules_of = {kind: list(modules) for kind, modules in hooked_modules(model, kinds, targets, activations).items()}
    keys = {
        kind: statistics_key(model_identity=model_identity, texts=texts, kind=kind,
                             max_length=max_length, modules=modules_of[kind])
        for kind in kinds
    }
    found: dict[str, Statistics] = {}
    source: dict[str, str] = {}
    _look_up(cache, keys, modules_of, len(texts), found, source, "disk")
    missing = [k for k in kinds if k not in found]
    if missing:
        locks = [lock for lock in (cache.lock(keys[k]) for k in sorted(missing, key=keys.get)) if lock is not None]
        try:
            _acquire(locks)  # in key order
            if any(lock.waited for lock in locks):  # whoever held the lock has probably just written the entry
                _look_up(cache, keys, modules_of, len(texts), found, source, "waited")
            missing = [k for k in kinds if k not in found]
            if missing:
                cache.misses += len(missing)
                checkpoint = cache.checkpoint([keys[k] for k in missing], batch_size, checkpoint_every_s)
                computed = collect_statistics(
                    model, tokenizer, texts, kinds=missing, targets=targets, activations=activations,
                    batch_size=batch_size, max_length=max_length, progress=progress, desc=desc,
                    checkpoint=checkpoint,
                )
                _store(cache, computed, keys, checkpoint, found, source, resumed)
        finally:
            for lock in reversed(locks):
                lock.release()
    if any(s != "computed" for s in source.values()):
        clear_finished_checkpoints(cache, [keys[k] for k in kinds if source.get(k) != "computed"], batch_size)
    if sources is not None:
        sources.update(source)
    return found, keys


def clear_finished_checkpoints(cache: StatisticsCache, stored: Sequence[str], batch_size: int) -> None:
    """Delete the checkpoints (whole or half-written) of passes whose entries are all stored among ``stored``.

    A pass killed after storing its entries but before deleting its checkpoint leaves the checkpoint, and a
    kill in the middle of an earlier checkpoint write its temp file; a later run reads the stored entries
    and never runs that pass again, so it clears them here. A pass computes any subset of the kinds asked
    together, so every subset's checkpoint is looked for; no process writes the checkpoint of entries that
    are already stored, so this needs no lock."""
    if cache.root is None or not (cache.root / "partial").is_dir():
        return
    stored = sorted(set(stored))
    for size in range(1, len(stored) + 1):
        for subset in itertools.combinations(stored, size):
            checkpoint = cache.checkpoint(list(subset), batch_size)
            try:
                if checkpoint is not None:
                    checkpoint.clear()
            except OSError as exc:  # a read-only or failing cache: the files only waste space
                log.debug("statistics cache: cannot clear %s (%s)", checkpoint.path, exc)
                return
