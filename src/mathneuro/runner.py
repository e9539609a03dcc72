"""The pipeline of one sweep point, as plain Python:

load model → samples (task, filter) → statistics (cached) → selection → intervention →
evaluation → record → undo.

The loaded model and what points reuse live in :mod:`mathneuro.workbench`; :func:`run_point`
is what the Hydra CLI calls for every point. A point being run holds ``<run dir>/.running.lock``:
a second process given the same point (two workers on one sweep) skips it instead of repeating it.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from mathneuro import __version__
from mathneuro.config import Config, ConfigError, validate
from mathneuro.evaluation.samples import SAMPLES_DIR, samples_summary, write_samples
from mathneuro.export import export_edited_model
from mathneuro.intervention import apply_intervention
from mathneuro.locking import FileLock, LockTimeout
from mathneuro.method_registry import resolve_method
from mathneuro.methods import LAPE_SIZED
from mathneuro.models.devices import describe_hardware
from mathneuro.models.parameter_count import upstream_fractions
from mathneuro.peak_memory import peak_memory_mb, reset_peak_memory
from mathneuro.preflight import check_model_source, check_top_k, check_writable_dir, refuse_empty_selection
from mathneuro.recording import (
    WandbRun,
    read_complete_results,
)
from mathneuro.results import DEFAULT_REFERENCE, RESULTS_FILE, PointResult
from mathneuro.targets import (
    find_mlp_activations,
    mlp_widths,
    neuron_weight_counts,
)
from mathneuro.workbench import Samples, Workbench, _plain, get_workbench, prepare_samples  # noqa: F401

log = logging.getLogger("mathneuro")
RUNNING_LOCK = ".running.lock"  # in a run dir while a process runs that point
RUNNING_STALE_AFTER = 300.0  # seconds without a heartbeat after which a killed runner's claim is taken over


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
    if cfg.method.name in LAPE_SIZED:
        point["share"] = cfg.method.share  # which top-K rule (SPEC §4)
    if cfg.method.name == "random" and random_reference(cfg.method) != DEFAULT_REFERENCE:
        point["reference"] = random_reference(cfg.method)  # sized by another method than MathNeuro
    return point


def _setting(method: Any, key: str, default: Any = None) -> Any:
    """``method.<key>`` of a config node, dataclass or recorded mapping (``default`` where unset)."""
    value = method.get(key, default) if isinstance(method, Mapping) else getattr(method, key, default)
    return default if value is None else _plain(value)


def random_reference(method: Any) -> str:
    """The method whose per-matrix counts a ``random`` config (or recorded config) matches."""
    return str(_setting(method, "reference", DEFAULT_REFERENCE) or DEFAULT_REFERENCE)


def edited_weights(selection: Any, model: Any, num_parameters: int) -> dict:
    """How many weights an edit changes, neurons counted as the output-projection column each one feeds,
    so that weight-level (MathNeuro) and neuron-level (LAPE) selections compare by size."""
    edited = sum(int(m.sum()) for m in selection.masks.values())
    if selection.neurons:
        per_neuron = neuron_weight_counts(model)
        edited += sum(int(idx.numel()) * per_neuron.get(name, 0) for name, idx in selection.neurons.items())
    return {"num_weights_edited": edited,
            "fraction_of_model_edited": edited / num_parameters if num_parameters else None}


def stale_reason(done: dict, cfg: Config) -> str | None:
    """Why complete results of a point no longer answer ``cfg`` (None: they do). LAPE results written
    before ``method.share`` existed used the candidates' share, so they are stale under ``share=all``; a
    ``random`` point sized by another reference method answers another question."""
    if cfg.method.name in LAPE_SIZED:
        recorded = ((done.get("config") or {}).get("method") or {}).get("share", "candidates")
        if recorded != cfg.method.share:
            return f"made with method.share={recorded}, this run asks for {cfg.method.share}"
    if cfg.method.name == "random":
        method = (done.get("config") or {}).get("method") or {}
        recorded, wanted = random_reference(method), random_reference(cfg.method)
        if recorded != wanted:
            return f"made with method.reference={recorded}, this run asks for {wanted}"
        recorded_args, wanted_args = _setting(method, "reference_args", {}), _setting(cfg.method, "reference_args", {})
        if recorded_args != wanted_args:
            return f"made with method.reference_args={recorded_args}, this run asks for {wanted_args}"
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


def _with_method(cfg: Config, method_cfg: Any) -> Config:
    """``cfg`` with its method node replaced by the method's typed config (``cfg`` itself is unchanged)."""
    if dataclasses.is_dataclass(cfg):
        return dataclasses.replace(cfg, method=method_cfg)
    cfg = copy.copy(cfg)
    cfg.method = method_cfg
    return cfg


def run_point(cfg: Config, output_dir: str | Path, *, resolved_config: dict | None = None,
              group: str | None = None, tags: list[str] | None = None) -> dict:
    """Run one sweep point and write ``<output_dir>/results.json``; return the results.

    ``cfg`` is a :class:`Config` (dataclass instances, e.g. ``OmegaConf.to_object`` of the Hydra
    config). A point whose complete results already exist is skipped when ``cfg.resume``.
    Bad values raise :class:`ConfigError` before any model loads.
    """
    t_start = time.perf_counter()
    validate(cfg)
    spec, method_cfg = resolve_method(cfg.method)
    config_dict = resolved_config if resolved_config is not None else _plain(cfg)  # the method node as given
    cfg = _with_method(cfg, method_cfg)
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
    check_writable_dir(output_dir, "hydra.run.dir")
    check_writable_dir(cfg.cache_dir, "cache_dir")
    claim = FileLock(output_dir / RUNNING_LOCK, stale_after=RUNNING_STALE_AFTER)
    try:
        claim.acquire(timeout=0)
    except LockTimeout:  # another process (a second worker on the same sweep) is running this point
        holder = claim.holder() or {}
        log.warning("%s: running in another process (host %s, pid %s); skipping this point",
                    output_dir, holder.get("host"), holder.get("pid"))
        return {"skipped": True, "running_elsewhere": holder, "objective": None}
    try:
        if cfg.resume and claim.waited:  # it held the point until just now: it may have finished it
            done = read_complete_results(output_dir)
            if done is not None and not stale_reason(done, cfg):
                return {**done, "skipped": True}
        return _run_claimed_point(cfg, spec, config_dict, output_dir, group, tags, t_start)
    finally:
        claim.release()


def _run_claimed_point(cfg: Config, spec: Any, config_dict: dict, output_dir: Path, group: str | None,
                       tags: list[str] | None, t_start: float) -> dict:
    """The body of :func:`run_point`, run while this process holds the point's claim."""
    timings: dict[str, float] = {}
    memory: dict[str, dict[str, float]] = {}
    reset_peak_memory()  # this point's peaks, not those of the points run before it in this process

    def stage(name: str, t0: float) -> None:
        timings[name] = round(time.perf_counter() - t0, 3)
        memory[name] = peak_memory_mb()

    t0 = time.perf_counter()
    task = prepare_samples(cfg.task, "task", cfg.num_samples, 2 * cfg.seed, cfg.bootstrap)
    filters = [prepare_samples(cfg.filter, "filter", cfg.num_samples, 2 * cfg.seed + 1, cfg.bootstrap)]
    stage("data", t0)
    check_model_source(cfg.model.name_or_path, cfg.model.gguf_file)  # missing, unreadable or damaged files

    point = point_summary(cfg)
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
        if "lape" in spec.needs:
            try:
                find_mlp_activations(bench.model)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if spec.topk_per_matrix:  # a top-K too small for every target matrix: refuse before any statistics
            check_top_k(cfg.method.name, cfg.top_k, {n: tuple(mod.weight.shape)
                                                     for n, mod in bench.targets(cfg.method).items()})

        t0 = time.perf_counter()
        bench.used.clear()
        selection, stats_keys = bench.select(cfg.method, task, filters, top_k=cfg.top_k, seed=cfg.seed,
                                             max_length=cfg.max_length, batch_size=cfg.batch_size,
                                             progress=cfg.progress)
        stage("identification", t0)
        stats_used = list(bench.used)  # where each entry came from: computed/memory/disk/waited
        if selection.num_selected() == 0:  # editing nothing is never worth an evaluation
            refuse_empty_selection(cfg, lambda k: bench.select(
                cfg.method, task, filters, top_k=k, seed=cfg.seed, max_length=cfg.max_length,
                batch_size=cfg.batch_size, progress=False)[0].num_selected(),
                {n: tuple(mod.weight.shape) for n, mod in bench.targets(cfg.method).items()})
        evaluate = cfg.eval.is_enabled()
        baseline: dict[str, float] = {}
        baseline_samples = None
        baseline_later = False  # another worker is evaluating it: evaluate the edit first, then read it
        if evaluate and cfg.baseline and cfg.eval.baseline:
            baseline_samples = bench.baseline_samples_dir(cfg.eval) or output_dir / "baseline_samples"
            holder = bench.baseline_running_elsewhere(cfg.eval, baseline_samples)
            if holder is not None:
                baseline_later = True
                log.info("the unedited model is being evaluated by another process (host %s, pid %s): "
                         "evaluating the edit first", holder.get("host"), holder.get("pid"))
            else:
                t0 = time.perf_counter()
                baseline = bench.baseline(cfg.eval, baseline_samples)
                stage("baseline_evaluation", t0)
        num_parameters = sum(p.numel() for p in bench.model.parameters())
        if selection.neurons:
            num_scored = sum(mlp_widths(bench.model).values())
        else:
            num_scored = sum(int(m.weight.numel()) for m in bench.targets(cfg.method).values())
        summary = selection.summary(num_scored=num_scored, num_parameters=num_parameters)
        summary["top_k"] = cfg.top_k
        summary.update(edited_weights(selection, bench.model, num_parameters))
        summary.update(upstream_fractions(summary, bench.model, cfg.model.tied_embeddings_upstream))
        if selection.method == "lape":
            summary["lape"] = dict(selection.meta)  # the rule, candidates, kept, saturated (SPEC §4)
        elif isinstance(selection.meta.get("lape"), dict):  # random_neurons: the LAPE selection it is sized by
            summary["lape"] = dict(selection.meta["lape"])

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
        if baseline_later:
            t0 = time.perf_counter()
            baseline = bench.baseline(cfg.eval, baseline_samples)
            stage("baseline_evaluation", t0)
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
        record = PointResult(
            status="complete", point=point, config=config_dict, selection=summary, metrics=metrics,
            baseline_metrics=baseline, timings=timings, peak_memory=memory, statistics_keys=stats_keys,
            statistics=stats_used,
            sample_ids_hash={"task": task.ids_hash, "filter": filters[0].ids_hash}, versions=_versions(),
            objective=objective_value(cfg, metrics, baseline), hardware=describe_hardware(bench.model),
        )
        if evaluate and cfg.eval.log_samples:
            ev = bench.evaluator(cfg.eval)
            record.samples = samples_summary(output_dir, baseline_samples, ev.last_sample_kinds)
        results = record.to_json()
        record.write(output_dir / RESULTS_FILE)
        wandb_run.summary({k: v for k, v in record.row().items() if isinstance(v, (int, float))}
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

