"""The pipeline of one sweep point, as plain Python:

load model → samples (task, filter sets) → statistics (cached) → selection → intervention →
evaluation → record → undo.

The loaded model and what points reuse live in :mod:`mathneuro.pipeline.workbench`; the point being
run is a :class:`~mathneuro.pipeline.point.Point`. :func:`run_point` is what the Hydra CLI calls for
every point. A point being run holds ``<run dir>/.running.lock``: a second process given the same
point (two workers on one sweep) skips it instead of repeating it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from pathlib import Path

from mathneuro.edit.export import export_model
from mathneuro.edit.interventions.registry import default_intervention_node, resolve_intervention
from mathneuro.edit.interventions.spec import InterventionSpec
from mathneuro.evaluation.decoding.batch_journal import JOURNAL_DIR, journaling
from mathneuro.evaluation.generation import generation_eos_ids
from mathneuro.evaluation.samples import SAMPLES_DIR, copy_records, samples_summary, write_samples
from mathneuro.methods.registry import default_method_node, resolve_method
from mathneuro.methods.spec import MethodSpec
from mathneuro.models.devices import describe_hardware, machine_kind
from mathneuro.models.targets import find_mlp_activations
from mathneuro.pipeline.attempts import (
    Attempts,
    clear_attempts,
    computed_elsewhere,
    edit_payload,
    edited_store,
    payload_key,
    unreused_partials,
)
from mathneuro.pipeline.cluster import cluster_info
from mathneuro.pipeline.config import Config, ConfigError, own_settings, validate
from mathneuro.pipeline.point import (
    Point,
    objective_value,
    point_summary,
    with_method,
)
from mathneuro.pipeline.preflight import (
    check_model_source,
    check_top_k,
    check_writable_dir,
    refuse_empty_selection,
)
from mathneuro.pipeline.workbench import Workbench, _plain, get_workbench
from mathneuro.results.provenance import model_provenance, package_versions, plugin_provenance, provenance
from mathneuro.results.recording import WandbRun
from mathneuro.results.schema import RESULTS_FILE, PointResult, read_complete_results
from mathneuro.results.wandb_point import log_point, point_layout
from mathneuro.statistics.kinds import any_hooks
from mathneuro.util.io import remove_orphaned_temps_under
from mathneuro.util.locking import FileLock, LockTimeout
from mathneuro.util.peak_memory import reset_peak_memory
from mathneuro.util.plugins import override_key, unused_settings

log = logging.getLogger("mathneuro")
RUNNING_LOCK = ".running.lock"  # in a run dir while a process runs that point
BASELINE_RECORDS = "baseline_samples"  # in a sweep dir: the unedited model's records, one folder per eval config
RUNNING_STALE_AFTER = 300.0  # seconds without a heartbeat after which a killed runner's claim is taken over


def _versions() -> dict[str, str]:
    return {k: v for k, v in package_versions().items() if k != "python"}


def stale_reason(done: dict, cfg: Config) -> str | None:
    """Why complete results of a point no longer answer ``cfg`` (None: they do): its method decides
    (:meth:`~mathneuro.methods.spec.MethodSpec.stale_reason`; by default any of its settings changed),
    then any setting of its intervention that differs from the recorded one."""
    spec, method_cfg = resolve_method(cfg.method)
    recorded = ((done.get("config") or {}).get("method") or {})
    reason = spec.stale_reason(recorded if isinstance(recorded, dict) else {}, method_cfg)
    if reason:
        return reason
    ispec, icfg = resolve_intervention(cfg.intervention)
    old = (done.get("config") or {}).get("intervention")
    old = old if isinstance(old, dict) else {}
    for name in ispec.settings():
        before, now = _plain(old.get(name, ispec.default(name))), _plain(getattr(icfg, name))
        if json.dumps(before, sort_keys=True, default=str) != json.dumps(now, sort_keys=True, default=str):
            return f"made with intervention.{name}={before}, this run asks for {now}"
    return None


def ignored_settings(cfg: Config, spec: MethodSpec, ispec: InterventionSpec, overrides: Sequence[str],
                     in_sweep: bool) -> list[str]:
    """The ``method.<setting>`` and ``intervention.<setting>`` keys someone set that the chosen method (``spec``) or
    intervention (``ispec``) does not have. Alone, a point refuses them (ConfigError naming the first); in a sweep
    whose other methods or interventions use them (the CLI checked that each key fits one of them), they are
    logged and recorded in ``results.json`` as ignored."""
    keys: list[str] = []
    for key, plugin, schema in (("method", spec, default_method_node()),
                                ("intervention", ispec, default_intervention_node())):
        found = unused_settings(getattr(cfg, key), plugin, key, schema, overrides)
        if found and not in_sweep:
            raise ConfigError(f"{found[0]}: not a setting of {key} {plugin.name!r}; its settings: "
                              f"{', '.join(plugin.settings()) or 'none'}")
        for name in found:
            log.warning("%s does not apply to %s %s: ignored at this point", name, key, plugin.name)
        keys += found
    return keys


def run_point(cfg: Config, output_dir: str | Path, *, resolved_config: dict | None = None,
              group: str | None = None, tags: list[str] | None = None, overrides: Sequence[str] = (),
              in_sweep: bool = False, layout: dict | None = None,
              sweep_dir: str | Path | None = None) -> dict:
    """Run one sweep point and write ``<output_dir>/results.json``; return the results.

    ``cfg`` is a :class:`Config` (dataclass instances, e.g. ``OmegaConf.to_object`` of the Hydra
    config). A point whose complete results already exist is skipped when ``cfg.resume``.
    Bad values raise :class:`ConfigError` before any model loads; so does a ``method.<setting>`` the
    method lacks, unless ``in_sweep`` (the point is one of a sweep across methods): then it is
    recorded as ignored. ``overrides``: the command line's overrides (which settings were given).
    ``group``, ``tags``, ``layout``: the W&B run's group, more tags, and what the CLI knows of the sweep
    (:func:`~mathneuro.results.wandb_point.point_layout`).
    ``sweep_dir``: the folder holding this point's run dir with its sibling points (Hydra's sweep dir;
    default ``output_dir`` itself): the unedited model's per-example records are copied there once, under
    ``baseline_samples/<key>/``, so that the folder holds everything its report needs.
    """
    t_start = time.perf_counter()
    validate(cfg)
    spec, method_cfg = resolve_method(cfg.method)
    ispec, intervention_cfg = resolve_intervention(cfg.intervention)
    try:
        ispec.check_unit(spec.unit, spec.name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.export_model and not ispec.exportable:
        raise ConfigError(f"export_model: intervention {ispec.name!r} edits activations through hooks, which a "
                          "saved model cannot hold; export_model=false")
    ignored = ignored_settings(cfg, spec, ispec, overrides, in_sweep)
    if getattr(cfg, "filters", None) and any(override_key(o).split(".")[0] == "filter" for o in overrides):
        raise ConfigError(f"filter: not used when filters is given ({', '.join(cfg.filters)}); list every filter "
                          "set in filters=[...]")
    config_dict = resolved_config if resolved_config is not None else _plain(cfg)  # the method node as given
    if getattr(cfg, "filters", None):  # filters=[...] replaced filter: results.json and W&B name only what ran
        config_dict = {k: v for k, v in config_dict.items() if k != "filter"}
    # only the chosen method's and intervention's settings (the schema carries every built-in's)
    config_dict = {k: own_settings(v, {"method": resolve_method, "intervention": resolve_intervention}[k])
                   if k in ("method", "intervention") else v for k, v in config_dict.items()}
    cfg = with_method(cfg, method_cfg, intervention_cfg)
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
        reset_peak_memory()  # this point's peaks, not those of the points run before it in this process
        point = Point(cfg, spec, output_dir)  # its model loads in the body, timed as a stage
        attempts = Attempts(output_dir)
        attempts.start()  # a second one and up: an earlier attempt was cut short (a timeout, a preemption)
        return _run_claimed_point(point, config_dict, point_layout(cfg, point_summary(cfg, spec), output_dir,
                                                                   group=group, tags=tags, layout=layout),
                                  t_start, ignored, attempts,
                                  Path(sweep_dir) if sweep_dir is not None else output_dir)
    finally:
        claim.release()


def open_wandb_run(cfg: Config, layout: dict, config: dict, run_id: str, output_dir: Path) -> WandbRun:
    """The point's W&B run (a no-op one without ``logger=wandb``); every attempt at the point logs into it."""
    run = WandbRun(
        cfg.logger.name == "wandb", init_timeout=cfg.logger.init_timeout, verbose=cfg.logger.verbose,
        project=cfg.logger.project, entity=cfg.logger.entity, mode=cfg.logger.mode,
        group=layout["group"], job_type=layout["job_type"], tags=layout["tags"], name=layout["name"],
        config=config, dir=str(output_dir), id=run_id, resume="allow",
    )
    if run.run is not None:
        log.info("W&B run %r (id %s, group %s): %s", layout["name"], run.run.id, layout["group"], run.told)
    return run


def _evaluate_baseline(point: Point, samples_dir) -> dict[str, float]:
    """The unedited model's metrics (evaluated, or read from the cache), its evaluation lines so labelled."""
    evaluator = point.evaluator
    evaluator.label, calls = "unedited model", evaluator.calls
    metrics = point.bench.baseline(point.cfg.eval, samples_dir)
    log.info("unedited model: %s", "evaluated" if evaluator.calls > calls else
             "metrics read from the cache (evaluated once per model and eval config)")
    return metrics


def keep_baseline_records(bench: Workbench, cfg: Config, records: Path, output_dir: Path, sweep_dir: Path) -> Path:
    """The unedited model's records in ``sweep_dir`` (``baseline_samples/<key>/``, copied once from the
    cache), or ``records`` where they already lie in the run dir or the run dir is outside ``sweep_dir``."""
    if records.resolve().is_relative_to(output_dir.resolve()):
        return records
    if not output_dir.resolve().is_relative_to(sweep_dir.resolve()):
        sweep_dir = output_dir
    return copy_records(records, sweep_dir / BASELINE_RECORDS / bench.baseline_key(cfg.eval))


def _run_claimed_point(point: Point, config_dict: dict, layout: dict, t_start: float, ignored: list[str],
                       attempts: Attempts, sweep_dir: Path) -> dict:
    """The body of :func:`run_point`, run while this process holds the point's claim."""
    cfg, spec, output_dir = point.cfg, point.spec, point.output_dir
    with point.stage("data"):
        _ = point.task, point.filters
    check_model_source(cfg.model.name_or_path, cfg.model.gguf_file,  # missing, unreadable or damaged files,
                       trust_remote_code=cfg.model.trust_remote_code)  # a folder transformers cannot load

    summary_point = point_summary(cfg, spec)
    wandb_run = WandbRun(False)  # opened once the model and data are known good: a refused run leaves none
    failed, interrupted = True, False
    try:
        with point.stage("load_model"):
            point.bench = get_workbench(cfg)
        bench = point.bench
        bench.checkpoint_every_s = cfg.checkpoint_every_s
        bench.baseline_kept.clear()
        bench.on_resumed = lambda entries: attempts.note("statistics", entries)
        if any_hooks(spec.needs, "mlp_activations"):
            try:
                find_mlp_activations(bench.model)
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        if spec.min_top_k is not None:  # a top-K too small for every target matrix: refuse before any statistics
            check_top_k(cfg.method.name, cfg.top_k, point.target_shapes, spec.min_top_k)
        origin = {"model": model_provenance(cfg.model.name_or_path, cfg.cache_dir),  # what ran besides mathneuro
                  "plugins": plugin_provenance(config_dict)}
        wandb_run = open_wandb_run(cfg, layout, {**config_dict, "point": summary_point, "provenance": provenance(**origin)},
                                   attempts.run_id(), output_dir)

        bench.used.clear()
        with point.stage("identification"):
            selection, stats_keys = point.select()
        stats_used = list(bench.used)  # where each entry came from: computed/memory/disk/waited
        for entry in stats_used:
            log.info("statistics %s/%s: %s", entry.get("dataset"), entry.get("kind"), {
                "computed": "computed", "memory": "read from memory (an earlier point of this process)",
                "disk": "read from the cache", "waited": "read from the cache (computed by another process)",
            }.get(str(entry.get("source")), entry.get("source")))
        if selection.num_selected() == 0:  # editing nothing is never worth an evaluation
            refuse_empty_selection(cfg, spec, lambda k: point.select(top_k=k, progress=False)[0].num_selected(),
                                   point.target_shapes)
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
                with point.stage("baseline_evaluation"):
                    baseline = _evaluate_baseline(point, baseline_samples)
                attempts.note("baseline_tasks", list(bench.baseline_kept))
        summary = point.selection_summary(selection)
        if summary.get("num_weights_edited") not in (None, summary.get("num_selected")):  # a neuron is no parameter
            log.info("selection: %s of %s MLP neurons (%.4g%%), feeding %s weights (%.4g%% of the model's parameters)",
                     summary.get("num_selected"), summary.get("num_scored"), 100 * (summary.get("fraction_of_scored") or 0),
                     summary.get("num_weights_edited"), 100 * (summary.get("fraction_of_model_edited") or 0))
        else:
            log.info("selection: %s of %s scored entries (%.4g%% of the model's parameters)", summary.get("num_selected"),
                     summary.get("num_scored"), 100 * (summary.get("fraction_of_model") or 0))

        metrics: dict[str, float] = {}
        drafting = None
        unreused: list[dict] = []  # kept results of earlier attempts at another edit or eval
        elsewhere: dict[str, str] = {}  # tasks read back that another kind of machine computed
        ispec, icfg = point.intervention
        with point.stage("intervention"):
            edit = ispec(point.intervention_context(selection, wandb_run.curve), icfg)
        with edit:  # undone on leaving, whatever happens inside
            if cfg.export_model:  # the edited model, before the undo
                with point.stage("export"), edit.baked(ispec.name):
                    export_model(bench.model, bench.tokenizer, output_dir / "model", point.export_card(summary))
            if evaluate:
                payload = edit_payload(bench.identity, cfg.eval.fingerprint(), generation_eos_ids(bench.model),
                                       selection, ispec.edit_identity(icfg), cfg.eval.log_samples)
                key, hardware = payload_key(payload), describe_hardware(bench.model)
                unreused = unreused_partials(output_dir, key, payload, hardware)
                for item in unreused:
                    log.warning("%s: %s", output_dir, item["reason"])
                store = edited_store(output_dir, key, payload=payload, hardware=hardware)
                drafts_before = bench.draft_store().counts.copy()
                point.evaluator.label = "edited model"
                log.info("evaluating the edited model")
                # finished tasks, and the generated batches of the task in progress, kept for a next attempt
                with point.stage("evaluation"), journaling(bench.model, store.folder / JOURNAL_DIR,
                                                           machine_kind(hardware)) as journal:
                    metrics = point.evaluator.evaluate(store)
                drafting = bench.draft_store().counts.since(drafts_before).as_dict()  # tokens drafted, accepted
                attempts.note("edited_tasks", list(store.reused))
                elsewhere = computed_elsewhere(store, hardware)
                if journal is not None and journal.elsewhere:  # a task resumed from batches decoded elsewhere
                    elsewhere["generated batches"] = ", ".join(f"{m} ({n})" for m, n in sorted(journal.elsewhere.items()))
                for task, machine in elsewhere.items():
                    log.warning("%s: %s was read back from an earlier attempt on %s; this attempt runs on %s, "
                                "so its scores carry the other machine's rounding", output_dir, task, machine,
                                machine_kind(hardware) or "an unrecorded machine")
                if cfg.eval.log_samples:
                    write_samples(output_dir / SAMPLES_DIR, point.evaluator.last_samples,
                                  point.evaluator.last_sample_kinds)
        if baseline_later:
            with point.stage("baseline_evaluation"):
                baseline = _evaluate_baseline(point, baseline_samples)
            attempts.note("baseline_tasks", list(bench.baseline_kept))
        if cfg.save_selection or wandb_run.run is not None and cfg.logger.artifacts:  # W&B's selection artifact
            selection.save(output_dir / "selection.safetensors")
        if cfg.save_selection:
            for suffix, extra in point.extra_selections().items():  # e.g. MathNeuro's math top-K set
                extra.save(output_dir / f"selection_{suffix}.safetensors")
        point.timings["total"] = round(time.perf_counter() - t_start, 3)
        record = PointResult(
            status="complete", point=summary_point, config=config_dict, selection=summary, metrics=metrics,
            baseline_metrics=baseline, timings=point.timings, peak_memory=point.memory,
            statistics_keys=stats_keys, statistics=stats_used, sample_ids_hash=point.sample_ids_hash(),
            versions=_versions(), objective=objective_value(cfg, metrics, baseline),
            hardware=describe_hardware(bench.model), cluster=cluster_info(), attempts=attempts.count,
            resumed=attempts.resumed(), drafting=drafting,
            provenance=provenance(point.evaluator.last_task_info if evaluate else {}, **origin),
        )
        record.extra["method_facts"] = spec.facts()
        record.extra["intervention"] = {"name": ispec.name, **edit.record}
        record.extra["intervention_facts"] = ispec.facts()
        if ignored:
            record.extra["ignored_settings"] = ignored
        origin = bench.baseline_origin.get(bench.baseline_key(cfg.eval), {}) if baseline else {}
        for what in ("hardware", "provenance"):  # who made the unedited metrics: this point, or the cache's writer
            if origin.get(what):
                record.extra[f"baseline_{what}"] = origin[what]
        if baseline_hw := origin.get("hardware"):
            if machine_kind(baseline_hw) != machine_kind(record.hardware):
                log.warning("%s: the unedited model's metrics were computed on %s (read from the cache); this point "
                            "runs on %s, so the report will not pair it with the unedited model (machines differ)", output_dir,
                            machine_kind(baseline_hw) or "an unrecorded machine",
                            machine_kind(record.hardware) or "an unrecorded machine")
        if elsewhere:  # tasks read back that another kind of machine computed
            record.extra["computed_elsewhere"] = elsewhere
        if unreused:  # kept results of earlier attempts that did not match this edit
            record.extra["not_resumed"] = [{k: v for k, v in item.items() if k != "reason"} for item in unreused]
        if wandb_run.run is not None:  # which W&B run holds this point (the report updates it online)
            record.extra["wandb"] = {"id": wandb_run.run.id, "project": cfg.logger.project, "entity": cfg.logger.entity,
                                     "group": layout["group"], "name": layout["name"], "mode": cfg.logger.mode}
        if evaluate and cfg.eval.log_samples:
            if baseline_samples is not None:  # the sweep keeps its own copy: the cache may be cleared
                baseline_samples = keep_baseline_records(bench, cfg, baseline_samples, output_dir, sweep_dir)
            record.samples = samples_summary(output_dir, baseline_samples, point.evaluator.last_sample_kinds,
                                             root=sweep_dir)
        results = record.to_json()
        record.write(output_dir / RESULTS_FILE)
        clear_attempts(output_dir)  # the point is done: its attempt count and kept partial results go
        remove_orphaned_temps_under(output_dir)  # and what a killed attempt was writing (we hold the claim)
        log_point(wandb_run, record, output_dir, layout)
        failed = False
        return results
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM, a submitit timeout: say so to W&B
        interrupted = True
        raise
    finally:
        if point.bench is not None:
            point.bench.on_resumed = None  # the workbench outlives this point; its attempts file does not
        wandb_run.finish(failed=failed, preempted=interrupted)
