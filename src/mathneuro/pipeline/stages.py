"""The stages of a point this process has claimed: model, identify, baseline, edit and evaluate, record.

Each stage takes the :class:`~mathneuro.pipeline.point.Point` (its config, its resolved method and
intervention, its model) and what the stages before it produced (:class:`Identified`,
:class:`Baseline`, :class:`Edited`); :class:`Attempt` holds what they share for this attempt at the
point (its attempts file, its W&B run). :func:`mathneuro.pipeline.runner.run_point` runs them in order.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from mathneuro.edit.export import export_model
from mathneuro.evaluation.decoding.batch_journal import JOURNAL_DIR, journaling
from mathneuro.evaluation.generation import generation_eos_ids
from mathneuro.evaluation.samples import SAMPLES_DIR, copy_records, samples_summary, write_samples
from mathneuro.methods.selection import Selection
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
from mathneuro.pipeline.config import Config, ConfigError
from mathneuro.pipeline.point import Point, objective_value
from mathneuro.pipeline.preflight import check_top_k, refuse_empty_selection
from mathneuro.pipeline.workbench import Workbench, get_workbench
from mathneuro.results.provenance import model_provenance, package_versions, plugin_provenance, provenance
from mathneuro.results.recording import WandbRun
from mathneuro.results.schema import RESULTS_FILE, PointResult
from mathneuro.results.wandb_point import log_point
from mathneuro.statistics.kinds import any_hooks
from mathneuro.util.io import remove_orphaned_temps_under

log = logging.getLogger("mathneuro")
BASELINE_RECORDS = "baseline_samples"  # in a sweep dir: the unedited model's records, one folder per eval config
STATISTICS_SOURCES = {"computed": "computed", "memory": "read from memory (an earlier point of this process)",
                      "disk": "read from the cache", "waited": "read from the cache (computed by another process)"}


@dataclass
class Attempt:
    """This process's attempt at a claimed point: the point's attempts file, its W&B run and its layout, when
    the point started, and what ran besides mathneuro (the model's and the plugins' provenance)."""

    attempts: Attempts
    layout: dict
    started: float
    wandb: WandbRun = field(default_factory=lambda: WandbRun(False))  # opened once model and data are good
    origin: dict = field(default_factory=dict)


@dataclass
class Identified:
    """What identification found: the selection, the statistics keys it read and where each entry came from."""

    selection: Selection
    keys: list[str]
    statistics: list[dict]


@dataclass
class Baseline:
    """The unedited model's metrics and where its per-example records lie; ``later``: another process is
    evaluating it, so it is read after the edit is evaluated."""

    metrics: dict[str, float] = field(default_factory=dict)
    samples: Path | None = None
    later: bool = False


@dataclass
class Edited:
    """What editing and evaluating produced: the edited model's metrics, the intervention's record, the drafted
    tokens, kept results of earlier attempts not reused, and tasks read back that another machine computed."""

    metrics: dict[str, float] = field(default_factory=dict)
    record: dict = field(default_factory=dict)
    drafting: dict | None = None
    unreused: list[dict] = field(default_factory=list)
    elsewhere: dict[str, str] = field(default_factory=dict)


def _versions() -> dict[str, str]:
    return {k: v for k, v in package_versions().items() if k != "python"}


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


def load_model(point: Point, attempt: Attempt) -> None:
    """The model stage: the process's workbench for the point's model, the checks that need the model, then
    the point's W&B run (a refused point leaves none)."""
    cfg, spec = point.cfg, point.spec
    with point.stage("load_model"):
        point.bench = get_workbench(cfg)
    if any_hooks(spec.needs, "mlp_activations"):
        try:
            find_mlp_activations(point.bench.model)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if spec.min_top_k is not None:  # a top-K too small for every target matrix: refuse before any statistics
        check_top_k(cfg.method.name, cfg.top_k, point.target_shapes, spec.min_top_k)
    attempt.origin = {"model": model_provenance(cfg.model.name_or_path, cfg.cache_dir),  # what ran besides mathneuro
                      "plugins": plugin_provenance(point.config)}
    attempt.wandb = open_wandb_run(cfg, attempt.layout, {**point.config, "point": point.summary,
                                                         "provenance": provenance(**attempt.origin)},
                                   attempt.attempts.run_id(), point.output_dir)


def identify(point: Point) -> Identified:
    """The identification stage: statistics (computed or read) and the selection; a selection that edits
    nothing is refused (ConfigError naming the smallest top-K that selects something)."""
    with point.stage("identification"):
        selection, keys = point.select()
    used = list(point.ledger.statistics)  # where each entry came from: computed/memory/disk/waited
    for entry in used:
        log.info("statistics %s/%s: %s", entry.get("dataset"), entry.get("kind"),
                 STATISTICS_SOURCES.get(str(entry.get("source")), entry.get("source")))
    if selection.num_selected() == 0:  # editing nothing is never worth an evaluation
        refuse_empty_selection(point.cfg, point.spec, lambda k: point.select(top_k=k, progress=False)[0].num_selected(),
                               point.target_shapes)
    return Identified(selection, keys, used)


def evaluate_baseline(point: Point, attempt: Attempt) -> Baseline:
    """The baseline stage: the unedited model's metrics (evaluated, or read from the cache), unless the point
    asks for none, or another process is evaluating them now: then they are ``later``, read after the edit
    is evaluated (:func:`evaluate_deferred_baseline`)."""
    cfg, bench = point.cfg, point.bench
    if not (cfg.eval.is_enabled() and cfg.baseline and cfg.eval.baseline):
        return Baseline()
    samples = bench.baseline_samples_dir(cfg.eval) or point.output_dir / "baseline_samples"
    holder = bench.baseline_running_elsewhere(cfg.eval, samples)
    if holder is not None:
        log.info("the unedited model is being evaluated by another process (host %s, pid %s): "
                 "evaluating the edit first", holder.get("host"), holder.get("pid"))
        return Baseline(samples=samples, later=True)
    return _unedited_metrics(point, attempt, samples)


def evaluate_deferred_baseline(point: Point, baseline: Baseline, attempt: Attempt) -> Baseline:
    """After the edit: a ``later`` baseline read (or evaluated) now; any other as it is."""
    return _unedited_metrics(point, attempt, baseline.samples) if baseline.later else baseline


def _unedited_metrics(point: Point, attempt: Attempt, samples: Path) -> Baseline:
    """The unedited model's metrics (its evaluation lines so labelled), timed as the baseline stage; the
    tasks read back from an earlier attempt are noted on the point's attempts."""
    with point.stage("baseline_evaluation"):
        evaluator = point.evaluator
        evaluator.label, calls = "unedited model", evaluator.calls
        metrics = point.bench.baseline(point.cfg.eval, samples, point.ledger)
        log.info("unedited model: %s", "evaluated" if evaluator.calls > calls else
                 "metrics read from the cache (evaluated once per model and eval config)")
    attempt.attempts.note("baseline_tasks", list(point.ledger.baseline_kept))
    return Baseline(metrics, samples)


def describe_selection(point: Point, selection: Selection) -> dict:
    """The ``selection`` block of ``results.json`` (:meth:`Point.selection_summary`), logged in one line."""
    summary = point.selection_summary(selection)
    if summary.get("num_weights_edited") not in (None, summary.get("num_selected")):  # a neuron is no parameter
        log.info("selection: %s of %s MLP neurons (%.4g%%), feeding %s weights (%.4g%% of the model's parameters)",
                 summary.get("num_selected"), summary.get("num_scored"), 100 * (summary.get("fraction_of_scored") or 0),
                 summary.get("num_weights_edited"), 100 * (summary.get("fraction_of_model_edited") or 0))
    else:
        log.info("selection: %s of %s scored entries (%.4g%% of the model's parameters)", summary.get("num_selected"),
                 summary.get("num_scored"), 100 * (summary.get("fraction_of_model") or 0))
    return summary


def edit_and_evaluate(point: Point, selection: Selection, summary: dict, attempt: Attempt) -> Edited:
    """The edit stage: apply the intervention, export the edited model if asked, evaluate it; the edit is
    undone on leaving, whatever happens inside."""
    cfg, bench = point.cfg, point.bench
    ispec, icfg = point.plugins.intervention, point.plugins.intervention_cfg
    with point.stage("intervention"):
        edit = ispec(point.intervention_context(selection, attempt.wandb.curve), icfg)
    edited = Edited()
    with edit:
        if cfg.export_model:  # the edited model, before the undo
            with point.stage("export"), edit.baked(ispec.name):
                export_model(bench.model, bench.tokenizer, point.output_dir / "model", point.export_card(summary))
        if cfg.eval.is_enabled():
            _evaluate_edit(point, selection, edited, attempt.attempts)
    edited.record = {"name": ispec.name, **edit.record}
    return edited


def _evaluate_edit(point: Point, selection: Selection, edited: Edited, attempts: Attempts) -> None:
    """Evaluate the edited model into ``edited``, reusing the tasks (and the generated batches of a task in
    progress) that an earlier attempt at this very edit kept."""
    cfg, bench, output_dir, evaluator = point.cfg, point.bench, point.output_dir, point.evaluator
    ispec, icfg = point.plugins.intervention, point.plugins.intervention_cfg
    payload = edit_payload(bench.identity, cfg.eval.fingerprint(), generation_eos_ids(bench.model),
                           selection, ispec.edit_identity(icfg), cfg.eval.log_samples)
    key, hardware = payload_key(payload), describe_hardware(bench.model)
    edited.unreused = unreused_partials(output_dir, key, payload, hardware)
    for item in edited.unreused:
        log.warning("%s: %s", output_dir, item["reason"])
    store = edited_store(output_dir, key, payload=payload, hardware=hardware)
    drafts_before = bench.draft_store().counts.copy()
    evaluator.label = "edited model"
    log.info("evaluating the edited model")
    # finished tasks, and the generated batches of the task in progress, kept for a next attempt
    with point.stage("evaluation"), journaling(bench.model, store.folder / JOURNAL_DIR,
                                               machine_kind(hardware)) as journal:
        edited.metrics = evaluator.evaluate(store)
    edited.drafting = bench.draft_store().counts.since(drafts_before).as_dict()  # tokens drafted, accepted
    attempts.note("edited_tasks", list(store.reused))
    edited.elsewhere = computed_elsewhere(store, hardware)
    if journal is not None and journal.elsewhere:  # a task resumed from batches decoded elsewhere
        edited.elsewhere["generated batches"] = ", ".join(f"{m} ({n})" for m, n in sorted(journal.elsewhere.items()))
    for task, machine in edited.elsewhere.items():
        log.warning("%s: %s was read back from an earlier attempt on %s; this attempt runs on %s, "
                    "so its scores carry the other machine's rounding", output_dir, task, machine,
                    machine_kind(hardware) or "an unrecorded machine")
    if cfg.eval.log_samples:
        write_samples(output_dir / SAMPLES_DIR, evaluator.last_samples, evaluator.last_sample_kinds)


def save_selections(point: Point, selection: Selection, wandb: WandbRun) -> None:
    """The selection in ``selection.safetensors`` (``save_selection``, or for W&B's artifact), and the further
    sets the method saves (e.g. MathNeuro's math top-K set) with ``save_selection``."""
    cfg = point.cfg
    if cfg.save_selection or wandb.run is not None and cfg.logger.artifacts:  # W&B's selection artifact
        selection.save(point.output_dir / "selection.safetensors")
    if cfg.save_selection:
        for suffix, extra in point.extra_selections().items():
            extra.save(point.output_dir / f"selection_{suffix}.safetensors")


def record(point: Point, found: Identified, summary: dict, baseline: Baseline, edited: Edited,
           attempt: Attempt) -> dict:
    """The record stage: ``results.json`` written whole, the point's kept partial results cleared, W&B told;
    return the results."""
    cfg, bench, output_dir, attempts = point.cfg, point.bench, point.output_dir, attempt.attempts
    evaluate = cfg.eval.is_enabled()
    point.timings["total"] = round(time.perf_counter() - attempt.started, 3)
    result = PointResult(
        status="complete", point=point.summary, config=point.config, selection=summary, metrics=edited.metrics,
        baseline_metrics=baseline.metrics, timings=point.timings, peak_memory=point.memory,
        statistics_keys=found.keys, statistics=found.statistics, sample_ids_hash=point.sample_ids_hash(),
        versions=_versions(), objective=objective_value(cfg, edited.metrics, baseline.metrics),
        hardware=describe_hardware(bench.model), cluster=cluster_info(), attempts=attempts.count,
        resumed=attempts.resumed(), drafting=edited.drafting,
        provenance=provenance(point.evaluator.last_task_info if evaluate else {}, **attempt.origin),
    )
    _record_extras(point, result, baseline, edited, attempt)
    if evaluate and cfg.eval.log_samples:
        samples = baseline.samples
        if samples is not None:  # the sweep keeps its own copy: the cache may be cleared
            samples = keep_baseline_records(bench, cfg, samples, output_dir, point.sweep_dir)
        result.samples = samples_summary(output_dir, samples, point.evaluator.last_sample_kinds, root=point.sweep_dir)
    results = result.to_json()
    result.write(output_dir / RESULTS_FILE)
    clear_attempts(output_dir)  # the point is done: its attempt count and kept partial results go
    remove_orphaned_temps_under(output_dir)  # and what a killed attempt was writing (we hold the claim)
    log_point(attempt.wandb, result, output_dir, attempt.layout)
    return results


def _record_extras(point: Point, result: PointResult, baseline: Baseline, edited: Edited, attempt: Attempt) -> None:
    """The fields of ``results.json`` beyond the schema's own: the plugins' facts, ignored settings, who made
    the unedited metrics, tasks computed elsewhere or not resumed, and the W&B run holding the point."""
    cfg, bench, plugins = point.cfg, point.bench, point.plugins
    result.extra["method_facts"] = plugins.method.facts()
    result.extra["intervention"] = edited.record
    result.extra["intervention_facts"] = plugins.intervention.facts()
    if point.ignored:
        result.extra["ignored_settings"] = point.ignored
    origin = bench.baseline_origin.get(bench.baseline_key(cfg.eval), {}) if baseline.metrics else {}
    for what in ("hardware", "provenance"):  # who made the unedited metrics: this point, or the cache's writer
        if origin.get(what):
            result.extra[f"baseline_{what}"] = origin[what]
    if baseline_hw := origin.get("hardware"):
        if machine_kind(baseline_hw) != machine_kind(result.hardware):
            log.warning("%s: the unedited model's metrics were computed on %s (read from the cache); this point "
                        "runs on %s, so the report will not pair it with the unedited model (machines differ)",
                        point.output_dir, machine_kind(baseline_hw) or "an unrecorded machine",
                        machine_kind(result.hardware) or "an unrecorded machine")
    if edited.elsewhere:  # tasks read back that another kind of machine computed
        result.extra["computed_elsewhere"] = edited.elsewhere
    if edited.unreused:  # kept results of earlier attempts that did not match this edit
        result.extra["not_resumed"] = [{k: v for k, v in item.items() if k != "reason"} for item in edited.unreused]
    if attempt.wandb.run is not None:  # which W&B run holds this point (the report updates it online)
        result.extra["wandb"] = {"id": attempt.wandb.run.id, "project": cfg.logger.project,
                                 "entity": cfg.logger.entity, "group": attempt.layout["group"],
                                 "name": attempt.layout["name"], "mode": cfg.logger.mode}


def keep_baseline_records(bench: Workbench, cfg: Config, records: Path, output_dir: Path, sweep_dir: Path) -> Path:
    """The unedited model's records in ``sweep_dir`` (``baseline_samples/<key>/``, copied once from the
    cache), or ``records`` where they already lie in the run dir or the run dir is outside ``sweep_dir``."""
    if records.resolve().is_relative_to(output_dir.resolve()):
        return records
    if not output_dir.resolve().is_relative_to(sweep_dir.resolve()):
        sweep_dir = output_dir
    return copy_records(records, sweep_dir / BASELINE_RECORDS / bench.baseline_key(cfg.eval))
