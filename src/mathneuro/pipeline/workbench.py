"""A loaded model and what a sweep reuses across its points: statistics, evaluators, baselines.

:class:`Workbench` holds one loaded model with its statistics cache and evaluators, so a whole
in-process sweep loads the model once, computes statistics once per dataset and the baseline
evaluation once; :func:`get_workbench` keeps one per process. It holds nothing of a single point: what
a point asks of it and hears back (statistics lookups, tasks read back, checkpoint interval) goes on
that point's :class:`PointLedger`. :func:`prepare_samples` draws and renders a dataset's texts.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from mathneuro.data.datasets import draw_samples, load_records, render, sample_ids_hash
from mathneuro.evaluation.decoding.batch_journal import JOURNAL_DIR, journaling
from mathneuro.evaluation.decoding.draft_seed import SeedCounts, seed_drafts
from mathneuro.evaluation.decoding.drafts import DraftStore, attach_draft_store, baseline_needs_drafts
from mathneuro.evaluation.evaluator import Evaluator
from mathneuro.evaluation.generation import generation_eos_ids
from mathneuro.evaluation.samples import SAMPLES_COMPLETE, SAMPLES_DIR, write_samples
from mathneuro.evaluation.task_store import TaskStore
from mathneuro.evaluation.task_table import TASKS
from mathneuro.methods.reference import remember_size, size_key
from mathneuro.methods.registry import resolve_method
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import MethodInputs, MethodSpec
from mathneuro.models import load_model, model_identity
from mathneuro.models.devices import describe_hardware, machine_kind
from mathneuro.models.targets import (
    DEFAULT_PATTERN,
    find_target_linears,
    weight_parameters,
    weights_fingerprint,
)
from mathneuro.pipeline.config import Config, ConfigError
from mathneuro.results.provenance import provenance
from mathneuro.statistics.cache import StatisticsCache, cached_statistics
from mathneuro.statistics.checkpoint import DEFAULT_EVERY_S
from mathneuro.statistics.kinds import any_hooks, kind_names
from mathneuro.util.io import remove_orphaned_temps, write_json_atomic

log = logging.getLogger("mathneuro")
KEPT_SIZES = 8  # input sets (statistics and weights) whose selections' sizes a workbench remembers


@dataclass
class Samples:
    """The rendered texts of one dataset draw, with what identifies them."""

    name: str
    texts: list[str]
    ids: list[int]
    ids_hash: str


def prepare_samples(dataset_cfg: Any, key: str, num_samples: int, seed: int, bootstrap: bool) -> Samples:
    """Load a dataset config's records, draw ``num_samples`` of them and render the template."""
    try:
        records = load_records(dataset_cfg.path, split=dataset_cfg.split, name=dataset_cfg.subset, key=f"{key}.path")
        if not records:
            raise ConfigError(f"{key}.path: dataset {dataset_cfg.path!r} is empty")
        ids = draw_samples(len(records), num_samples, seed, bootstrap)
        texts = render([records[i] for i in ids], dataset_cfg.template, key=f"{key}.template")
    except ConfigError:
        raise
    except ValueError as exc:  # bad data is a bad config value: one line, before any model loads
        raise ConfigError(str(exc)) from None
    return Samples(dataset_cfg.name, texts, ids, sample_ids_hash(ids))


@dataclass
class PointLedger:
    """What one point asks of the shared workbench and what it hears back: how often a statistics pass
    checkpoints, who is told of entries resumed from a checkpoint, and the lookups and reused tasks it made."""

    checkpoint_every_s: float = DEFAULT_EVERY_S  # seconds between checkpoints of a statistics pass
    # told at once of each statistics entry a pass completed from an earlier attempt's checkpoint, so that an
    # attempt stopped before its selection is made still leaves that on the point's record
    on_resumed: Callable[[list[dict]], None] | None = None
    statistics: list[dict] = field(default_factory=list)  # {dataset, kind, key, source} of each statistics lookup
    baseline_kept: list[str] = field(default_factory=list)  # baseline tasks read back from an earlier attempt


@dataclass
class Workbench:
    """One loaded model and everything reusable across the sweep points that edit it."""

    model: torch.nn.Module
    tokenizer: Any
    identity: dict
    cache: StatisticsCache
    evaluators: dict = field(default_factory=dict)
    baselines: dict = field(default_factory=dict)
    # baseline key -> who computed it: {"hardware": describe_hardware, "provenance": the code (version, git,
    # packages)}; a key left out of it for a cache entry written before they were recorded
    baseline_origin: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)  # inputs' identity -> sizes of the selections made from them
    drafts: DraftStore | None = None  # the unedited model's answers per request (drafted decoding)

    def targets(self, method_cfg: Any) -> dict:
        """The linears a method config scores: its ``targets`` pattern, lm_head if ``include_lm_head``."""
        return find_target_linears(self.model, getattr(method_cfg, "targets", DEFAULT_PATTERN),
                                   getattr(method_cfg, "include_lm_head", False))

    def statistics(self, samples: Samples, kinds: tuple[str, ...], *, targets: dict | None = None,
                   max_length: int, batch_size: int, progress: bool = True,
                   ledger: PointLedger | None = None) -> tuple[dict, dict]:
        """Statistics of ``samples`` for each kind (cached on disk and in memory) and their keys; each lookup
        is noted in ``ledger`` (the asking point's), whose ``checkpoint_every_s`` a pass checkpoints at."""
        ledger = ledger if ledger is not None else PointLedger()
        kinds = kind_names(kinds)
        sources: dict[str, str] = {}
        resumed: dict[str, int] = {}
        found, keys = cached_statistics(
            self.cache, self.model, self.tokenizer, samples.texts, model_identity=self.identity, kinds=kinds,
            targets=targets, max_length=max_length, batch_size=batch_size,
            progress=progress, desc=f"statistics [{samples.name}]", sources=sources,
            checkpoint_every_s=ledger.checkpoint_every_s, resumed=resumed,
        )
        used = [{"dataset": samples.name, "kind": kind, "key": keys[kind], "source": sources[kind]}
                | ({"resumed_batches": resumed[kind]} if kind in resumed else {}) for kind in kinds]
        ledger.statistics.extend(used)
        if resumed and ledger.on_resumed is not None:
            ledger.on_resumed([entry for entry in used if "resumed_batches" in entry])
        return found, keys

    def select(self, method: Any, task: Samples, filters: list[Samples], *, top_k: float, seed: int,
               max_length: int, batch_size: int, progress: bool = True, targets: dict | None = None,
               spec: MethodSpec | None = None, ledger: PointLedger | None = None) -> tuple[Selection, list[str]]:
        """The selection of ``method`` (a config node, dataclass or name; see
        :func:`~mathneuro.methods.registry.resolve_method`) and the statistics keys it used;
        ``targets``: its scored linears when the caller has them already; ``spec``: the method's spec when the
        caller resolved it (``method`` is then its typed config); ``ledger``: the asking point's."""
        spec, method_cfg = (spec, method) if spec is not None else resolve_method(method)
        kinds = spec.needs
        if any_hooks(kinds, "linears") and not targets:
            targets = self.targets(method_cfg)
        elif not any_hooks(kinds, "linears"):
            targets = None
        keys: list[str] = []

        def stats_of(samples: Samples) -> dict:
            found, k = self.statistics(samples, kinds, targets=targets, max_length=max_length,
                                       batch_size=batch_size, progress=progress, ledger=ledger)
            keys.extend(k[kind] for kind in kinds)
            return found

        task_stats = stats_of(task)
        uses_filters = spec.uses_filters and method_cfg.uses_filters()
        filter_stats = [stats_of(f) for f in filters] if uses_filters else []  # Wanda: no filter pass
        weights = weight_parameters(targets) if targets is not None else {}
        inputs = MethodInputs(task=task_stats, filters=filter_stats, weights=weights, top_k=top_k, seed=seed,
                              model=self.model, sizes=self._sizes_of(keys, weights))
        selection = spec(inputs, method_cfg)
        if not isinstance(selection, Selection):
            raise TypeError(f"method {spec.name!r} returned {type(selection).__name__}, not a Selection")
        check_unit(spec.name, spec.unit, selection)
        remember_size(inputs.sizes, size_key(spec.name, method_cfg, inputs), selection)
        return selection, keys

    def _sizes_of(self, keys: list[str], weights: dict) -> dict:
        """The sizes remembered for selections made from these statistics and these weights' contents (the
        whole model's matrices for a method scoring none): a few input sets are kept, the latest last."""
        scored = weights or {n: p for n, p in self.model.named_parameters() if p.dim() >= 2}
        identity = (tuple(keys), weights_fingerprint(scored))
        sizes = self.sizes.pop(identity, None) or {}
        self.sizes[identity] = sizes
        while len(self.sizes) > KEPT_SIZES:
            self.sizes.pop(next(iter(self.sizes)))
        return sizes

    def evaluator(self, eval_cfg: Any):
        """The evaluator of this model for ``eval_cfg``, built once (it wraps lm-eval's HFLM once)."""
        key = eval_cfg.fingerprint()
        if key not in self.evaluators:
            self.evaluators[key] = Evaluator(self.model, self.tokenizer, eval_cfg)
            attach_draft_store(self.model, self.draft_store())
        return self.evaluators[key]

    def draft_store(self) -> DraftStore:
        """The unedited model's generated tokens per request, under ``<cache>/baselines/drafts/`` (built once)."""
        if self.drafts is None:
            root = self.cache.root / "baselines" / "drafts" if self.cache.root else None
            self.drafts = DraftStore(root, {"model": self.identity, "generation_eos_ids": sorted(
                generation_eos_ids(self.model))}, vocab_size=getattr(self.model.config, "vocab_size", None))
        return self.drafts

    def seed_drafts(self, eval_cfg: Any, records: str | Path) -> dict[str, SeedCounts]:
        """Fill this model's draft store from the unedited model's per-example records in the folder
        ``records`` (a baseline's ``<task>.jsonl`` files, as written with ``eval.log_samples``), so points
        draft without evaluating the baseline again: one replay per generation task of ``eval_cfg``
        (:func:`~mathneuro.evaluation.decoding.draft_seed.seed_drafts`; no model pass runs)."""
        harness = self.evaluator(eval_cfg).harness
        tasks = [t for t in eval_cfg.tasks if t not in TASKS or (TASKS[t].harness and TASKS[t].generates)]
        return {task: seed_drafts(harness, task, records, self.draft_store()) for task in tasks}

    def baseline_key(self, eval_cfg: Any) -> str:
        """The unedited model's evaluation is cached per model, eval config and the tokens generation stops at
        (which a GGUF model's generation config gained later than its weights' identity)."""
        stops = sorted(generation_eos_ids(self.model))
        return _hash({"model": self.identity, "eval": eval_cfg.fingerprint(), "generation_eos_ids": stops})

    def baseline_samples_dir(self, eval_cfg: Any) -> Path | None:
        """Where the unedited model's per-example records for ``eval_cfg`` live (None without a cache dir)."""
        key = self.baseline_key(eval_cfg)
        return self.cache.root / "baselines" / key / SAMPLES_DIR if self.cache.root else None

    def baseline_running_elsewhere(self, eval_cfg: Any, samples_dir: Path | None = None) -> dict | None:
        """Who is evaluating the unedited model for ``eval_cfg`` now, if another process is and its
        result is not stored yet (else None). A caller can then evaluate its edit first instead of
        waiting for the lock, and read the baseline afterwards."""
        key = self.baseline_key(eval_cfg)
        if self.cache.root is None or (
                (key in self.baselines or (self.cache.root / "baselines" / f"{key}.json").exists())
                and not _samples_missing(eval_cfg, samples_dir)):
            return None
        lock = self.cache.lock(f"baseline-{key}")
        return lock.held_elsewhere() if lock is not None else None

    def baseline(self, eval_cfg: Any, samples_dir: Path | None = None,
                 ledger: PointLedger | None = None) -> dict[str, float]:
        """Metrics of the unedited model, computed once per model and eval config (memory, then disk).

        With ``eval_cfg.log_samples`` and a ``samples_dir``, its per-example records are written there
        once too (the baseline is evaluated again only if they are missing). Processes sharing the
        cache evaluate it once: the one evaluating holds ``<cache>/locks/baseline-<key>.lock``, the
        others wait for it and read its result. Tasks read back from an earlier attempt cut short are
        noted in ``ledger`` (the asking point's).
        """
        key = self.baseline_key(eval_cfg)

        def need_samples() -> bool:
            return _samples_missing(eval_cfg, samples_dir)

        if key in self.baselines and not need_samples():
            return self.baselines[key]
        path = self.cache.root / "baselines" / f"{key}.json" if self.cache.root else None

        def stored() -> dict[str, float] | None:
            if path is None or not path.exists() or need_samples():
                return None
            metrics = _read_baseline(path, self.identity)
            if metrics is None or baseline_needs_drafts(eval_cfg, path):
                return None
            self.baseline_origin[key] = _stored_origin(path)
            return metrics

        metrics = stored()
        if metrics is None:
            lock = self.cache.lock(f"baseline-{key}")
            with lock if lock is not None else contextlib.nullcontext():
                if lock is not None and lock.waited:  # another process has probably just evaluated it
                    metrics = stored()
                if metrics is None:
                    metrics = self._evaluate_baseline(eval_cfg, key, path, samples_dir,
                                                      ledger if ledger is not None else PointLedger())
        self.baselines[key] = metrics
        return metrics

    def _evaluate_baseline(self, eval_cfg: Any, key: str, path: Path | None, samples_dir: Path | None,
                           ledger: PointLedger) -> dict[str, float]:
        """Evaluate the unedited model (under its baseline lock), write its records to ``samples_dir`` where
        they are missing and its cache entry to ``path``, and note in ``ledger`` the tasks read back from a cut
        attempt."""
        evaluator = self.evaluator(eval_cfg)
        store = (TaskStore(path.with_name(f"{key}.tasks"), f"{key}-samples{int(bool(eval_cfg.log_samples))}")
                 if path is not None else None)  # finished tasks, kept for an attempt cut short
        journal = store.folder / JOURNAL_DIR if store is not None else None  # batches of a cut task
        here = machine_kind(describe_hardware(self.model))
        with self.draft_store().recording() as drafts, journaling(self.model, journal, here) as kept:
            recorded = drafts.recorded  # its answers: the drafts of later points
            metrics = evaluator.evaluate(store)
        if kept is not None and kept.elsewhere:
            log.warning("the unedited model's evaluation read back generated batches another kind of "
                        "machine decoded (%s); this is %s", kept.elsewhere, here)
        if _samples_missing(eval_cfg, samples_dir):
            write_samples(samples_dir, evaluator.last_samples, evaluator.last_sample_kinds)
        code = provenance()
        self.baseline_origin[key] = {"hardware": describe_hardware(self.model),
                                     "provenance": {k: code[k] for k in ("version", "git", "packages")}}
        if path is not None:
            write_json_atomic(path, {"metrics": metrics, "model": self.identity, "eval": _plain(eval_cfg),
                                     "drafts": {"recorded": drafts.recorded - recorded}, **self.baseline_origin[key]})
            remove_orphaned_temps(path)  # a killed evaluator's (we hold the baseline's lock)
        if store is not None:
            ledger.baseline_kept.extend(store.reused)
            store.clear()
        return metrics


def selection_unit(selection: Selection) -> str | None:
    """What a selection edits: ``weights`` (masks), ``neurons`` (MLP neuron indices), ``weights and neurons``,
    or None when it selects nothing."""
    weights = any(bool(m.any()) for m in selection.masks.values())
    neurons = any(int(n.numel()) > 0 for n in selection.neurons.values())
    return {(True, False): "weights", (False, True): "neurons", (True, True): "weights and neurons"}.get(
        (weights, neurons))


def check_unit(method: str, declared: str, selection: Selection) -> None:
    """Refuse a selection whose unit is not the one its method declares: its random reference, its counts
    and its report would be of the wrong kind (ConfigError, one line naming the method and the mismatch)."""
    found = selection_unit(selection)
    if found is not None and found != declared:
        num = sum(int(m.sum()) for m in selection.masks.values()), sum(
            int(n.numel()) for n in selection.neurons.values())
        raise ConfigError(f"method {method!r}: declares unit={declared!r} but returned {found} ({num[0]} weights, "
                          f"{num[1]} neurons); register it with "
                          f"unit={'neurons' if found == 'neurons' else 'weights'!r} "
                          "or return a Selection of its unit")


def _samples_missing(eval_cfg: Any, samples_dir: Path | None) -> bool:
    """Whether the baseline's per-example records are asked for and not yet written whole."""
    return bool(eval_cfg.log_samples and samples_dir is not None and not (samples_dir / SAMPLES_COMPLETE).exists())


def _stored_origin(path: Path) -> dict:
    """The ``hardware`` and ``provenance`` a cached baseline entry was computed with (those it records: none
    for an entry written before they were)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: data[k] for k in ("hardware", "provenance") if isinstance(data, dict) and isinstance(data.get(k), dict)}


def _read_baseline(path: Path, identity: dict) -> dict[str, float] | None:
    """The cached baseline metrics at ``path`` if the entry is whole and is this model's, else None
    (with a one-line warning: the caller recomputes and rewrites it)."""
    try:
        data = json.loads(path.read_text())
        metrics = data["metrics"]
        if not isinstance(metrics, dict) or not metrics:
            raise ValueError("no metrics in it")
        if not all(isinstance(v, (int, float)) or v is None for v in metrics.values()):
            raise ValueError("a metric is not a number")
        if json.loads(json.dumps(identity, default=str)) != data.get("model"):
            raise ValueError("it records another model")
    except Exception as exc:  # noqa: BLE001 - unreadable, truncated or foreign: recompute
        reason = " ".join(str(exc).split()) or type(exc).__name__
        log.warning("baseline cache: entry %s is damaged or does not match (%s); recomputing and rewriting it",
                    path, reason)
        return None
    return metrics


def _plain(obj: Any) -> Any:
    from dataclasses import asdict, is_dataclass

    from omegaconf import DictConfig, OmegaConf

    if isinstance(obj, DictConfig):
        return OmegaConf.to_container(obj, resolve=True)
    if is_dataclass(obj):
        return asdict(obj)
    return obj


def _hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(_plain(obj), sort_keys=True, default=str).encode()).hexdigest()[:16]


_WORKBENCHES: dict[str, Workbench] = {}


@contextlib.contextmanager
def transformers_progress(enabled: bool) -> Iterator[None]:
    """Inside the block, transformers' and the Hub's progress bars (loading, downloading, converting)
    are off unless ``enabled``; as they were after it."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    if was and not enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was and not enabled:
            hf_logging.enable_progress_bar()


def get_workbench(cfg: Config) -> Workbench:
    """The process's workbench for ``cfg.model`` (loaded on first use, then reused by every point)."""
    m = cfg.model
    key = _hash({"model": _plain(m), "cache": cfg.cache_dir})
    bench = _WORKBENCHES.get(key)
    if bench is None:
        _WORKBENCHES.clear()  # one model in memory at a time
        try:
            with transformers_progress(cfg.progress):  # progress=false: no "Loading weights" bar either
                model, tok = load_model(m.name_or_path, gguf_file=m.gguf_file, dtype=m.dtype, device=m.device,
                                        revision=m.revision, trust_remote_code=m.trust_remote_code,
                                        cache_dir=cfg.cache_dir, device_map=m.device_map)
        except ValueError as exc:
            if str(exc).startswith("model."):  # the loader's own messages name the key: a bad value
                raise ConfigError(str(exc)) from exc
            raise
        identity = model_identity(model, m.name_or_path, m.dtype)
        bench = Workbench(model, tok, identity, StatisticsCache(Path(cfg.cache_dir) / "statistics"))
        _WORKBENCHES[key] = bench
    return bench
