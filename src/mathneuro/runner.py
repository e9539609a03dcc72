"""The pipeline of one sweep point, as plain Python:

load model → samples (task, filter) → statistics (cached) → selection → intervention →
evaluation → record → undo.

A :class:`Workbench` holds one loaded model with its statistics cache and evaluator, so a
whole in-process sweep loads the model once, computes statistics once per dataset and the
baseline evaluation once. :func:`run_point` is what the Hydra CLI calls for every point.
"""

from __future__ import annotations

import hashlib
import json
import logging
import resource
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

from mathneuro import __version__
from mathneuro.cache import StatisticsCache, cached_statistics
from mathneuro.config import Config, ConfigError, validate
from mathneuro.data import draw_samples, load_records, render, sample_ids_hash
from mathneuro.evaluation.samples import SAMPLES_COMPLETE, SAMPLES_DIR, samples_summary, write_samples
from mathneuro.export import export_edited_model
from mathneuro.intervention import apply_intervention
from mathneuro.methods import (
    lape_saturation_message,
    lape_selection,
    mathneuro_selection,
    random_selection,
    wanda_selection,
)
from mathneuro.models import load_model, model_identity
from mathneuro.preflight import check_model_source, check_top_k, check_writable_dir, refuse_empty_selection
from mathneuro.recording import (
    RESULTS_FILE,
    WandbRun,
    check_writable,
    read_complete_results,
    write_json_atomic,
)
from mathneuro.results import tidy_row
from mathneuro.selection import Selection
from mathneuro.targets import find_mlp_activations, find_target_linears, mlp_widths, weight_parameters

log = logging.getLogger("mathneuro")


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
class Workbench:
    """One loaded model and everything reusable across the sweep points that edit it."""

    model: torch.nn.Module
    tokenizer: Any
    identity: dict
    cache: StatisticsCache
    evaluators: dict = field(default_factory=dict)
    baselines: dict = field(default_factory=dict)
    used: list = field(default_factory=list)  # {dataset, kind, key, source} of each statistics lookup

    def targets(self, method: Any) -> dict:
        """The linears ``method`` (a MethodConfig-like object) scores: its name pattern, lm_head if asked."""
        return find_target_linears(self.model, method.targets, method.include_lm_head)

    def statistics(self, samples: Samples, kinds: tuple[str, ...], *, targets: dict | None = None,
                   max_length: int, batch_size: int, progress: bool = True) -> tuple[dict, dict]:
        """Statistics of ``samples`` for each kind (cached on disk and in memory) and their keys."""
        activations = find_mlp_activations(self.model) if "lape" in kinds else None
        sources: dict[str, str] = {}
        found, keys = cached_statistics(
            self.cache, self.model, self.tokenizer, samples.texts, model_identity=self.identity, kinds=kinds,
            targets=targets, activations=activations, max_length=max_length, batch_size=batch_size,
            progress=progress, desc=f"statistics [{samples.name}]", sources=sources,
        )
        self.used.extend({"dataset": samples.name, "kind": kind, "key": keys[kind], "source": sources[kind]}
                         for kind in kinds)
        return found, keys

    def select(self, method: Any, task: Samples, filters: list[Samples], *, top_k: float, seed: int,
               max_length: int, batch_size: int, progress: bool = True) -> tuple[Selection, list[str]]:
        """The selection of ``method`` (a MethodConfig-like object) and the statistics keys it used."""
        name = method.name
        keys: list[str] = []
        kind = "lape" if name == "lape" else "linear_inputs"
        targets = self.targets(method) if kind == "linear_inputs" else None

        def stats_of(samples: Samples):
            found, k = self.statistics(samples, (kind,), targets=targets, max_length=max_length,
                                       batch_size=batch_size, progress=progress)
            keys.append(k[kind])
            return found[kind]

        if name == "lape":
            sel = lape_selection(stats_of(task), [stats_of(f) for f in filters], top_k,
                                 filter_rate=method.filter_rate, activation_bar=method.activation_bar,
                                 share=getattr(method, "share", "all"))
            message = lape_saturation_message(sel.meta)
            if message:
                log.warning(message)
            return sel, keys
        weights = weight_parameters(targets)
        task_stats = stats_of(task)
        if name in ("wanda", "wanda_row"):
            return wanda_selection(weights, task_stats, top_k, per_row=name == "wanda_row"), keys
        reference = mathneuro_selection(weights, task_stats, [stats_of(f) for f in filters], top_k,
                                        filter_top_k=method.filter_top_k)
        if name == "mathneuro":
            return reference, keys
        shapes = {n: w.shape for n, w in weights.items()}
        sel = random_selection(shapes, reference.counts(), seed)
        sel.meta.update(top_k=top_k, reference="mathneuro")
        return sel, keys

    def evaluator(self, eval_cfg: Any):
        """The evaluator of this model for ``eval_cfg``, built once (it wraps lm-eval's HFLM once)."""
        from mathneuro.evaluation import Evaluator

        key = eval_cfg.fingerprint()
        if key not in self.evaluators:
            self.evaluators[key] = Evaluator(self.model, self.tokenizer, eval_cfg)
        return self.evaluators[key]

    def baseline_samples_dir(self, eval_cfg: Any) -> Path | None:
        """Where the unedited model's per-example records for ``eval_cfg`` live (None without a cache dir)."""
        key = _hash({"model": self.identity, "eval": eval_cfg.fingerprint()})
        return self.cache.root / "baselines" / key / SAMPLES_DIR if self.cache.root else None

    def baseline(self, eval_cfg: Any, samples_dir: Path | None = None) -> dict[str, float]:
        """Metrics of the unedited model, computed once per model and eval config (memory, then disk).

        With ``eval_cfg.log_samples`` and a ``samples_dir``, its per-example records are written there
        once too (the baseline is evaluated again only if they are missing).
        """
        key = _hash({"model": self.identity, "eval": eval_cfg.fingerprint()})
        need_samples = bool(eval_cfg.log_samples and samples_dir is not None
                            and not (samples_dir / SAMPLES_COMPLETE).exists())
        if key in self.baselines and not need_samples:
            return self.baselines[key]
        path = self.cache.root / "baselines" / f"{key}.json" if self.cache.root else None
        metrics = None
        if path is not None and path.exists() and not need_samples:
            metrics = _read_baseline(path, self.identity)
        if metrics is None:
            evaluator = self.evaluator(eval_cfg)
            metrics = evaluator.evaluate()
            if need_samples:
                write_samples(samples_dir, evaluator.last_samples, evaluator.last_sample_kinds)
            if path is not None:
                write_json_atomic(path, {"metrics": metrics, "model": self.identity, "eval": _plain(eval_cfg)})
        self.baselines[key] = metrics
        return metrics


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


def get_workbench(cfg: Config) -> Workbench:
    """The process's workbench for ``cfg.model`` (loaded on first use, then reused by every point)."""
    m = cfg.model
    key = _hash({"model": _plain(m), "cache": cfg.cache_dir})
    bench = _WORKBENCHES.get(key)
    if bench is None:
        _WORKBENCHES.clear()  # one model in memory at a time
        try:
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


def _versions() -> dict[str, str]:
    import importlib.metadata as md

    out = {"mathneuro": __version__}
    for pkg in ("torch", "transformers", "lm_eval", "hydra-core", "wandb", "datasets"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def objective_value(cfg: Config, metrics: dict, baseline: dict) -> float:
    """The number a sweeper optimises: relative gain of ``objective.metric`` (raw value without a
    baseline), minus the excess relative drop of ``objective.constraint`` beyond its tolerance."""
    metric = cfg.objective.metric or next((k for k in metrics if k.startswith("math/")), None)
    if metric is None or metric not in metrics:
        return float("nan")

    def rel(name):
        before = baseline.get(name)
        if before in (None, 0):
            return metrics[name]
        return (metrics[name] - before) / abs(before)

    value = rel(metric)
    if cfg.objective.constraint and cfg.objective.constraint in metrics:
        drop = -rel(cfg.objective.constraint)
        if drop > cfg.objective.tolerance:
            value -= 1.0 + (drop - cfg.objective.tolerance)
    return float(value)


def point_summary(cfg: Config) -> dict:
    """The few config values that identify a sweep point in reports."""
    point = {
        "model": cfg.model.name, "task": cfg.task.name, "filter": cfg.filter.name, "method": cfg.method.name,
        "top_k": cfg.top_k, "intervention": cfg.intervention.name, "scalar": cfg.intervention.scalar,
        "seed": cfg.seed, "num_samples": cfg.num_samples,
    }
    if cfg.method.name == "lape":
        point["share"] = cfg.method.share  # which top-K rule (SPEC §4)
    return point


def stale_reason(done: dict, cfg: Config) -> str | None:
    """Why complete results of a point no longer answer ``cfg`` (None: they do). LAPE results written
    before ``method.share`` existed used the candidates' share, so they are stale under ``share=all``."""
    if cfg.method.name == "lape":
        recorded = ((done.get("config") or {}).get("method") or {}).get("share", "candidates")
        if recorded != cfg.method.share:
            return f"made with method.share={recorded}, this run asks for {cfg.method.share}"
    return None


def export_card(cfg: Config, selection_summary: dict) -> dict:
    """What produced an exported model: model, method, top-K, scalar, data and seed."""
    return {
        "model": cfg.model.name, "base_model": cfg.model.name_or_path, "method": cfg.method.name,
        "top_k": cfg.top_k, "intervention": cfg.intervention.name, "scalar": cfg.intervention.scalar,
        "task_data": f"{cfg.task.name} ({cfg.task.path})", "filter_data": f"{cfg.filter.name} ({cfg.filter.path})",
        "num_samples": cfg.num_samples, "bootstrap": cfg.bootstrap, "seed": cfg.seed,
        "num_selected": selection_summary.get("num_selected"), "mathneuro_version": __version__,
    }


def peak_memory_mb() -> dict[str, float]:
    """Peak resident memory of this process so far (MB) and, on CUDA, peak allocated GPU memory."""
    peak = {"rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        peak["cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return peak


def run_point(cfg: Config, output_dir: str | Path, *, resolved_config: dict | None = None,
              group: str | None = None, tags: list[str] | None = None) -> dict:
    """Run one sweep point and write ``<output_dir>/results.json``; return the results.

    ``cfg`` is a :class:`Config` (dataclass instances, e.g. ``OmegaConf.to_object`` of the Hydra
    config). A point whose complete results already exist is skipped when ``cfg.resume``.
    Bad values raise :class:`ConfigError` before any model loads.
    """
    t_start = time.perf_counter()
    validate(cfg)
    output_dir = Path(output_dir)
    if cfg.resume:
        done = read_complete_results(output_dir)
        stale = stale_reason(done, cfg) if done is not None else None
        if stale:
            log.warning("%s: complete results found but %s; recomputing this point", output_dir, stale)
        elif done is not None:
            log.info("%s: complete results found, skipping this point", output_dir)
            done["skipped"] = True
            return done
    try:
        check_writable(output_dir)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    check_writable_dir(cfg.cache_dir, "cache_dir")
    timings: dict[str, float] = {}
    memory: dict[str, dict[str, float]] = {}

    def stage(name: str, t0: float) -> None:
        timings[name] = round(time.perf_counter() - t0, 3)
        memory[name] = peak_memory_mb()

    t0 = time.perf_counter()
    task = prepare_samples(cfg.task, "task", cfg.num_samples, 2 * cfg.seed, cfg.bootstrap)
    filters = [prepare_samples(cfg.filter, "filter", cfg.num_samples, 2 * cfg.seed + 1, cfg.bootstrap)]
    stage("data", t0)
    check_model_source(cfg.model.name_or_path, cfg.model.gguf_file)  # missing, unreadable or damaged files

    point = point_summary(cfg)
    config_dict = resolved_config if resolved_config is not None else _plain(cfg)
    wandb_run = WandbRun(
        cfg.logger.name == "wandb", init_timeout=cfg.logger.init_timeout, project=cfg.logger.project,
        entity=cfg.logger.entity, mode=cfg.logger.mode,
        group=group, job_type=cfg.method.name, tags=(tags or []) + list(cfg.logger.tags),
        config={**config_dict, "point": point}, dir=str(output_dir), name=output_dir.name,
    )
    failed, interrupted = True, False
    try:
        t0 = time.perf_counter()
        bench = get_workbench(cfg)
        stage("load_model", t0)
        if cfg.method.name == "lape":
            try:
                find_mlp_activations(bench.model)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if cfg.method.name != "lape":  # a top-K too small for every target matrix: refuse before any statistics
            check_top_k(cfg.method.name, cfg.top_k, {n: tuple(mod.weight.shape)
                                                     for n, mod in bench.targets(cfg.method).items()})

        t0 = time.perf_counter()
        bench.used.clear()
        selection, stats_keys = bench.select(cfg.method, task, filters, top_k=cfg.top_k, seed=cfg.seed,
                                             max_length=cfg.max_length, batch_size=cfg.batch_size,
                                             progress=cfg.progress)
        stage("identification", t0)
        if selection.num_selected() == 0:  # editing nothing is never worth an evaluation
            refuse_empty_selection(cfg, lambda k: bench.select(
                cfg.method, task, filters, top_k=k, seed=cfg.seed, max_length=cfg.max_length,
                batch_size=cfg.batch_size, progress=False)[0].num_selected(),
                {n: tuple(mod.weight.shape) for n, mod in bench.targets(cfg.method).items()})
        evaluate = cfg.eval.is_enabled()
        baseline: dict[str, float] = {}
        baseline_samples = None
        if evaluate and cfg.baseline and cfg.eval.baseline:
            t0 = time.perf_counter()
            baseline_samples = bench.baseline_samples_dir(cfg.eval) or output_dir / "baseline_samples"
            baseline = bench.baseline(cfg.eval, baseline_samples)
            stage("baseline_evaluation", t0)
        num_parameters = sum(p.numel() for p in bench.model.parameters())
        if selection.neurons:
            num_scored = sum(mlp_widths(bench.model).values())
        else:
            num_scored = sum(int(m.weight.numel()) for m in bench.targets(cfg.method).values())
        summary = selection.summary(num_scored=num_scored, num_parameters=num_parameters)
        summary["top_k"] = cfg.top_k
        if selection.method == "lape":
            summary["lape"] = dict(selection.meta)  # the rule, candidates, kept, saturated (SPEC §4)

        metrics: dict[str, float] = {}
        t0 = time.perf_counter()
        handle = apply_intervention(bench.model, selection, cfg.intervention.scalar)
        stage("intervention", t0)
        try:
            if cfg.export_model:  # the edited model, before the undo
                t0 = time.perf_counter()
                export_edited_model(bench.model, bench.tokenizer, selection, cfg.intervention.scalar,
                                    output_dir / "model", export_card(cfg, summary))
                stage("export", t0)
            if evaluate:
                t0 = time.perf_counter()
                metrics = bench.evaluator(cfg.eval).evaluate()
                stage("evaluation", t0)
                if cfg.eval.log_samples:
                    ev = bench.evaluator(cfg.eval)
                    write_samples(output_dir / SAMPLES_DIR, ev.last_samples, ev.last_sample_kinds)
        finally:
            handle.undo()
        if cfg.save_selection:
            selection.save(output_dir / "selection.safetensors")
            if cfg.method.name == "mathneuro":  # its math top-K set too (data efficiency of both sets)
                wanda = SimpleNamespace(name="wanda", targets=cfg.method.targets,
                                        include_lm_head=cfg.method.include_lm_head)  # = the math top-K
                topk, _ = bench.select(wanda, task, [], top_k=cfg.top_k, seed=cfg.seed,
                                       max_length=cfg.max_length, batch_size=cfg.batch_size, progress=False)
                topk.method, topk.meta["set"] = "mathneuro_topk", "math top-K (M before the filter)"
                topk.save(output_dir / "selection_topk.safetensors")
        timings["total"] = round(time.perf_counter() - t_start, 3)
        results = {
            "status": "complete",
            "point": point,
            "config": config_dict,
            "selection": summary,
            "metrics": metrics,
            "baseline_metrics": baseline,
            "timings": timings,
            "peak_memory": memory,
            "statistics_keys": stats_keys,
            "statistics": list(bench.used),  # where each entry came from: computed/memory/disk/waited
            "sample_ids_hash": {"task": task.ids_hash, "filter": filters[0].ids_hash},
            "versions": _versions(),
        }
        results["objective"] = objective_value(cfg, metrics, baseline)
        if evaluate and cfg.eval.log_samples:
            ev = bench.evaluator(cfg.eval)
            results["samples"] = samples_summary(output_dir, baseline_samples, ev.last_sample_kinds)
        write_json_atomic(output_dir / RESULTS_FILE, results)
        wandb_run.summary({k: v for k, v in tidy_row(results).items() if isinstance(v, (int, float))}
                          | {f"time/{k}": v for k, v in timings.items()})
        wandb_run.table("selection/per_layer", ["layer", "count"],
                        [[k, v] for k, v in summary["per_layer"].items()])
        failed = False
        return results
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (errors.Interrupted): nothing was written; say so to W&B
        interrupted = True
        raise
    finally:
        wandb_run.finish(failed=failed, preempted=interrupted)

