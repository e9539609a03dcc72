"""One sweep point while it runs: its config, its method and intervention, the loaded model and its samples.

A :class:`Point` is built once per point, at the start of :func:`mathneuro.pipeline.runner.run_point`,
from its checked config and its method and intervention resolved once
(:class:`~mathneuro.pipeline.config.Plugins`), and asked for everything the runner needs: the samples
(task and every filter set), the scored linears, the selection, the evaluator and the fields
``results.json`` records. What the point asks of the shared workbench is noted on its own
:class:`~mathneuro.pipeline.workbench.PointLedger`. What differs between methods comes from the method's
spec (:class:`~mathneuro.methods.spec.MethodSpec`), never from its name.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from mathneuro import __version__
from mathneuro.edit.interventions.spec import InterventionContext
from mathneuro.evaluation.evaluator import Evaluator
from mathneuro.methods.registry import resolve_method
from mathneuro.methods.selection import Selection
from mathneuro.methods.spec import MethodSpec
from mathneuro.models.parameter_count import upstream_fractions
from mathneuro.models.targets import mlp_widths, neuron_weight_counts
from mathneuro.pipeline.config import Config, Plugins
from mathneuro.pipeline.workbench import PointLedger, Samples, Workbench, prepare_samples
from mathneuro.statistics.kinds import any_hooks
from mathneuro.util.peak_memory import peak_memory_mb

log = logging.getLogger("mathneuro")


def filter_configs(cfg: Config) -> list[Any]:
    """The filter sets of a point: every entry of ``filters`` (their union is filtered out), else ``filter``."""
    several = getattr(cfg, "filters", None) or {}
    return list(several.values()) if several else [cfg.filter]


def filter_name(cfg: Config) -> str:
    """How reports name a point's filter sets: ``race``, or ``race+mmlu`` for several."""
    return "+".join(str(f.name) for f in filter_configs(cfg))


def point_summary(cfg: Config, plugins: Plugins) -> dict:
    """The few config values that identify a sweep point in reports, plus the method's and the intervention's
    own point fields (the intervention's ``scalar``, and its other fields as ``intervention_args``);
    ``plugins``: the point's method and intervention as resolved."""
    ispec, icfg = plugins.intervention, plugins.intervention_cfg
    point = {
        "model": cfg.model.name, "task": cfg.task.name, "filter": filter_name(cfg),
        "method": plugins.method_cfg.name, "top_k": cfg.top_k, "intervention": ispec.name, **ispec.point(icfg),
        "seed": cfg.seed, "num_samples": cfg.num_samples,
    }
    point.update(plugins.method.point(plugins.method_cfg))
    return point


def with_method(cfg: Config, method_cfg: Any, intervention_cfg: Any = None) -> Config:
    """``cfg`` with its method node (and ``intervention_cfg``: its intervention node) replaced by the typed
    config (``cfg`` itself is unchanged)."""
    changes = {"method": method_cfg} | ({"intervention": intervention_cfg} if intervention_cfg is not None else {})
    if dataclasses.is_dataclass(cfg):
        return dataclasses.replace(cfg, **changes)
    cfg = copy.copy(cfg)
    for key, value in changes.items():
        setattr(cfg, key, value)
    return cfg


def edited_weights(selection: Selection, model: Any, num_parameters: int) -> dict:
    """How many weights an edit changes, neurons counted as the output-projection column each one feeds,
    so that weight-level and neuron-level selections compare by size."""
    edited = sum(int(m.sum()) for m in selection.masks.values())
    if selection.neurons:
        per_neuron = neuron_weight_counts(model)
        edited += sum(int(idx.numel()) * per_neuron.get(name, 0) for name, idx in selection.neurons.items())
    return {"num_weights_edited": edited,
            "fraction_of_model_edited": edited / num_parameters if num_parameters else None}


def jsonable(value: Any) -> Any:
    """``value`` with tensors, tuples and other objects turned into JSON data (for ``selection.meta``)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


@dataclass
class Point:
    """A sweep point being run (see the module docstring)."""

    cfg: Config  # its method and intervention nodes are the typed configs of ``plugins``
    plugins: Plugins
    output_dir: Path
    given: Any = None  # the config as given (untyped method and intervention nodes): what it set, for refusals
    sweep_dir: Path | None = None  # the folder holding its run dir with its sibling points (None: output_dir)
    config: dict = field(default_factory=dict)  # the config results.json and W&B record
    ignored: list[str] = field(default_factory=list)  # settings given that its method or intervention lacks
    ledger: PointLedger = field(default_factory=PointLedger)  # what it asked of the workbench and heard back
    bench: Workbench | None = None  # the loaded model: set when the point's model stage runs
    timings: dict[str, float] = field(default_factory=dict)
    memory: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.sweep_dir is None:
            self.sweep_dir = self.output_dir

    @property
    def spec(self) -> MethodSpec:
        """The point's method."""
        return self.plugins.method

    @cached_property
    def summary(self) -> dict:
        """The fields that identify the point in reports (:func:`point_summary`)."""
        return point_summary(self.cfg, self.plugins)

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time a stage and read its peak memory into :attr:`timings` / :attr:`memory`."""
        t0 = time.perf_counter()
        yield
        self.timings[name] = round(time.perf_counter() - t0, 3)
        self.memory[name] = peak_memory_mb()

    # ------------------------------------------------------------------ what the point reads
    @cached_property
    def task(self) -> Samples:
        cfg = self.cfg
        return prepare_samples(cfg.task, "task", cfg.num_samples, 2 * cfg.seed, cfg.bootstrap)

    @cached_property
    def filters(self) -> list[Samples]:
        """Every filter set's draw; each is drawn as it would be alone, so statistics are shared across points."""
        cfg = self.cfg
        many = len(filter_configs(cfg)) > 1
        return [prepare_samples(f, f"filters.{f.name}" if many else "filter", cfg.num_samples, 2 * cfg.seed + 1,
                                cfg.bootstrap) for f in filter_configs(cfg)]

    @cached_property
    def targets(self) -> dict:
        """The linears the method scores (its ``targets`` pattern; lm_head with ``include_lm_head``)."""
        return self.bench.targets(self.cfg.method) if any_hooks(self.spec.needs, "linears") else {}

    @cached_property
    def target_shapes(self) -> dict[str, tuple[int, ...]]:
        """Shapes of the linears the method's ``targets`` pattern names (for the smallest useful top-K)."""
        targets = self.targets or self.bench.targets(self.cfg.method)
        return {n: tuple(mod.weight.shape) for n, mod in targets.items()}

    def intervention_context(self, selection: Selection, log: Any = None) -> InterventionContext:
        """What the intervention is given: the model, the selection, the point's seed and calibration settings,
        and the task samples where it declared ``needs=("task_samples",)``; ``log(metrics, step)``: W&B."""
        cfg = self.cfg
        wants_task = "task_samples" in self.plugins.intervention.needs
        return InterventionContext(
            model=self.bench.model, tokenizer=self.bench.tokenizer, selection=selection, seed=cfg.seed,
            task_texts=list(self.task.texts) if wants_task else None, task_name=self.task.name,
            task_ids_hash=self.task.ids_hash, max_length=cfg.max_length, batch_size=cfg.batch_size,
            progress=cfg.progress, **({"log": log} if log is not None else {}))

    @cached_property
    def evaluator(self) -> Evaluator:
        return self.bench.evaluator(self.cfg.eval)

    # ------------------------------------------------------------------ identification
    def select(self, top_k: float | None = None, method: Any = None, *, progress: bool | None = None
               ) -> tuple[Selection, list[str]]:
        """The selection of this point's method (or ``method``, e.g. an extra set) at ``top_k``, and the
        statistics keys it read."""
        cfg, own = self.cfg, method is None
        return self.bench.select(cfg.method if own else method, self.task, self.filters,
                                 top_k=cfg.top_k if top_k is None else top_k, seed=cfg.seed,
                                 max_length=cfg.max_length, batch_size=cfg.batch_size,
                                 progress=cfg.progress if progress is None else progress,
                                 targets=self.targets if own else None, spec=self.spec if own else None,
                                 ledger=self.ledger)

    def extra_selections(self) -> dict[str, Selection]:
        """The further sets the method saves (its spec's ``extra_selections``), by suffix."""
        out = {}
        for suffix, extra in self.spec.extra_selections.items():
            other, _ = resolve_method({"name": extra.method})
            shared = {f: getattr(self.cfg.method, f) for f in other.settings() if hasattr(self.cfg.method, f)}
            selection, _ = self.select(method={**shared, "name": extra.method}, progress=False)
            selection.method = f"{self.cfg.method.name}_{suffix}"
            selection.meta["set"] = extra.description or f"{extra.method} at the same settings"
            out[suffix] = selection
        return out

    def selection_summary(self, selection: Selection) -> dict:
        """The ``selection`` block of ``results.json``: counts and fractions, the weights an edit changes,
        the method's metadata (``meta``) and its spec's own fields."""
        model = self.bench.model
        num_parameters = sum(p.numel() for p in model.parameters())
        if selection.neurons:
            num_scored = sum(mlp_widths(model).values())
        else:
            num_scored = sum(math.prod(shape) for shape in self.target_shapes.values())
        summary = selection.summary(num_scored=num_scored, num_parameters=num_parameters)
        summary["top_k"] = self.cfg.top_k
        summary.update(edited_weights(selection, model, num_parameters))
        summary.update(upstream_fractions(summary, model, self.cfg.model.tied_embeddings_upstream))
        summary["meta"] = jsonable(dict(selection.meta))
        if self.spec.summary is not None:
            summary.update(jsonable(self.spec.summary(selection)))
        return summary

    def export_card(self, selection_summary: dict) -> dict:
        """What produced an exported model: model, method, top-K, the intervention and its settings, data and seed."""
        cfg = self.cfg
        ispec, icfg = self.plugins.intervention, self.plugins.intervention_cfg
        return {
            "model": cfg.model.name, "base_model": cfg.model.name_or_path, "method": cfg.method.name,
            "top_k": cfg.top_k, "intervention": ispec.name, **ispec.point(icfg),
            "task_data": f"{cfg.task.name} ({cfg.task.path})",
            "filter_data": " + ".join(f"{f.name} ({f.path})" for f in filter_configs(cfg)),
            "num_samples": cfg.num_samples, "bootstrap": cfg.bootstrap, "seed": cfg.seed,
            "num_selected": selection_summary.get("num_selected"), "mathneuro_version": __version__,
        }

    def sample_ids_hash(self) -> dict[str, str]:
        return {"task": self.task.ids_hash, "filter": "+".join(f.ids_hash for f in self.filters)}


def objective_value(cfg: Config, metrics: dict, baseline: dict) -> float:
    """The number a sweeper optimises: relative gain of ``objective.metric`` (raw value without a
    baseline), minus the excess relative drop of ``objective.constraint`` beyond its tolerance."""
    metric = cfg.objective.metric or next((k for k in metrics if k.startswith("math/")), None)
    if metric is None or metric not in metrics:
        return float("nan")

    def rel(name: str) -> float:
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

