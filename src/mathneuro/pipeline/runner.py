"""The pipeline of one sweep point, as plain Python:

load model → samples (task, filter sets) → statistics (cached) → selection → intervention →
evaluation → record → undo.

:func:`run_point` is what the Hydra CLI calls for every point: it builds the point once (a
:class:`~mathneuro.pipeline.point.Point` holding its method and intervention as
:func:`~mathneuro.pipeline.config.validate` resolved them), skips it where complete results still answer
its config, claims it and runs its stages (:mod:`mathneuro.pipeline.stages`). The loaded model and what
points reuse live in :mod:`mathneuro.pipeline.workbench`. A point being run holds ``<run dir>/.running.lock``: a second
process given the same point (two workers on one sweep) skips it instead of repeating it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path

from mathneuro.edit.interventions.registry import default_intervention_node
from mathneuro.edit.interventions.spec import InterventionSpec
from mathneuro.methods.registry import default_method_node
from mathneuro.methods.spec import MethodSpec
from mathneuro.pipeline.attempts import Attempts
from mathneuro.pipeline.config import Config, ConfigError, Plugins, settings_of, validate
from mathneuro.pipeline.point import (
    Point,
    with_method,
)
from mathneuro.pipeline.preflight import check_model_source, check_writable_dir
from mathneuro.pipeline.stages import (
    Attempt,
    describe_selection,
    edit_and_evaluate,
    evaluate_baseline,
    evaluate_deferred_baseline,
    identify,
    load_model,
    record,
    save_selections,
)
from mathneuro.pipeline.workbench import (
    PointLedger,
    _plain,
)
from mathneuro.results.schema import read_complete_results
from mathneuro.results.wandb_point import point_layout
from mathneuro.util.locking import FileLock, LockTimeout
from mathneuro.util.peak_memory import reset_peak_memory
from mathneuro.util.plugins import override_key, unused_settings

log = logging.getLogger("mathneuro")
RUNNING_LOCK = ".running.lock"  # in a run dir while a process runs that point
RUNNING_STALE_AFTER = 300.0  # seconds without a heartbeat after which a killed runner's claim is taken over


def stale_reason(done: dict, plugins: Plugins) -> str | None:
    """Why complete results of a point no longer answer its method and intervention, ``plugins`` (None: they
    do): its method decides (:meth:`~mathneuro.methods.spec.MethodSpec.stale_reason`; by default any of its
    settings changed), then any setting of its intervention that differs from the recorded one."""
    recorded = ((done.get("config") or {}).get("method") or {})
    reason = plugins.method.stale_reason(recorded if isinstance(recorded, dict) else {}, plugins.method_cfg)
    if reason:
        return reason
    old = (done.get("config") or {}).get("intervention")
    return plugins.intervention.stale_setting(old if isinstance(old, dict) else {}, plugins.intervention_cfg)


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
    started = time.perf_counter()
    plugins = validate(cfg)  # ConfigError on the first bad value; the method and the intervention resolved once
    point = Point(with_method(cfg, plugins.method_cfg, plugins.intervention_cfg), plugins, Path(output_dir),
                  given=cfg, sweep_dir=Path(sweep_dir) if sweep_dir is not None else None,
                  ledger=PointLedger(cfg.checkpoint_every_s))
    point.ignored = checked_settings(point, overrides, in_sweep)
    point.config = recorded_config(point, resolved_config)
    done = complete_results(point)
    if done is not None:
        return done
    check_writable_dir(point.output_dir, "hydra.run.dir")
    check_writable_dir(point.cfg.cache_dir, "cache_dir")
    claim = FileLock(point.output_dir / RUNNING_LOCK, stale_after=RUNNING_STALE_AFTER)
    try:
        claim.acquire(timeout=0)
    except LockTimeout:  # another process (a second worker on the same sweep) is running this point
        holder = claim.holder() or {}
        log.warning("%s: running in another process (host %s, pid %s); skipping this point",
                    point.output_dir, holder.get("host"), holder.get("pid"))
        return {"skipped": True, "running_elsewhere": holder, "objective": None}
    try:
        if point.cfg.resume and claim.waited:  # it held the point until just now: it may have finished it
            done = read_complete_results(point.output_dir)
            if done is not None and not stale_reason(done, point.plugins):
                return {**done, "skipped": True}
        reset_peak_memory()  # this point's peaks, not those of the points run before it in this process
        attempts = Attempts(point.output_dir)
        attempts.start()  # a second one and up: an earlier attempt was cut short (a timeout, a preemption)
        point.ledger.on_resumed = lambda entries: attempts.note("statistics", entries)
        layout = point_layout(point.cfg, point.summary, point.output_dir, group=group, tags=tags, layout=layout)
        return run_stages(point, Attempt(attempts, layout, started))
    finally:
        claim.release()


def checked_settings(point: Point, overrides: Sequence[str] = (), in_sweep: bool = False) -> list[str]:
    """The settings given that the point's method or intervention lacks (:func:`ignored_settings`), to be
    recorded as ignored; ConfigError for what the point refuses: an intervention of another unit than the
    method's, an export it cannot make, ``filter`` beside ``filters``."""
    given, ispec, spec = point.given, point.plugins.intervention, point.spec
    try:
        ispec.check_unit(spec.unit, spec.name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if given.export_model and not ispec.exportable:
        raise ConfigError(f"export_model: intervention {ispec.name!r} edits activations through hooks, which a "
                          "saved model cannot hold; export_model=false")
    ignored = ignored_settings(given, spec, ispec, overrides, in_sweep)
    if getattr(given, "filters", None) and any(override_key(o).split(".")[0] == "filter" for o in overrides):
        raise ConfigError(f"filter: not used when filters is given ({', '.join(given.filters)}); list every filter "
                          "set in filters=[...]")
    return ignored


def recorded_config(point: Point, resolved_config: dict | None = None) -> dict:
    """The config ``results.json`` and W&B record: ``resolved_config`` (the composed config), else the config
    as given; without ``filter`` where ``filters`` replaced it, and the ``method`` and ``intervention`` nodes
    cut to the settings of the point's own (the schema carries every built-in's)."""
    config = resolved_config if resolved_config is not None else _plain(point.given)  # the method node as given
    if getattr(point.given, "filters", None):  # filters=[...] replaced filter: results.json and W&B name only what ran
        config = {k: v for k, v in config.items() if k != "filter"}
    own = {"method": point.spec, "intervention": point.plugins.intervention}
    return {k: settings_of(v, own[k]) if k in own else v for k, v in config.items()}


def complete_results(point: Point) -> dict | None:
    """With ``resume``, the point's complete results where they still answer its config (marked skipped);
    else None (logged where results were found but are stale)."""
    if not point.cfg.resume:
        return None
    done = read_complete_results(point.output_dir)
    stale = stale_reason(done, point.plugins) if done is not None else None
    if stale:
        log.warning("%s: complete results found but %s; recomputing this point", point.output_dir, stale)
    elif done is not None:
        log.info("%s: complete results found, skipping this point", point.output_dir)
        done["skipped"] = True
        return done
    return None


def run_stages(point: Point, attempt: Attempt) -> dict:
    """The point's life while this process holds its claim: data, model, identify, baseline, edit and
    evaluate, record (:mod:`mathneuro.pipeline.stages`); its W&B run is finished whatever happens."""
    cfg = point.cfg
    with point.stage("data"):
        _ = point.task, point.filters
    check_model_source(cfg.model.name_or_path, cfg.model.gguf_file,  # missing, unreadable or damaged files,
                       trust_remote_code=cfg.model.trust_remote_code)  # a folder transformers cannot load
    failed, interrupted = True, False
    try:
        load_model(point, attempt)
        found = identify(point)
        baseline = evaluate_baseline(point, attempt)
        summary = describe_selection(point, found.selection)
        edited = edit_and_evaluate(point, found.selection, summary, attempt)
        baseline = evaluate_deferred_baseline(point, baseline, attempt)  # another process was evaluating it
        save_selections(point, found.selection, attempt.wandb)
        results = record(point, found, summary, baseline, edited, attempt)
        failed = False
        return results
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, SIGTERM, a submitit timeout: say so to W&B
        interrupted = True
        raise
    finally:
        attempt.wandb.finish(failed=failed, preempted=interrupted)
