"""``Evaluator``: evaluates one loaded model, as it is at call time, on the tasks of an ``EvalConfig``.

Built once per process per loaded model; the runner calls :meth:`Evaluator.evaluate` on the
unedited model (baseline) and again after each intervention. Metric names are flat:
``<math|nonmath>/<task>/<metric>`` with lm-eval's metric names and ``<metric>_stderr``; a group
reports its aggregate under its own name and every subgroup / subtask under theirs (same side).
A task outside our table and outside ``eval.math_tasks`` / ``eval.nonmath_tasks`` counts as
non-math; the process says so once per task. With ``eval.log_samples`` the per-example records
of every evaluated harness task, and of every probe that scores example by example (``arith``,
``mc``, ``gsm8k_gen``; a user's probe through ``ProbeContext.records``), land in ``last_samples``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from mathneuro.evaluation.config import EvalConfig
from mathneuro.evaluation.directions import higher_is_better
from mathneuro.evaluation.harness import Harness, preserved_rng
from mathneuro.evaluation.probe_registry import ProbeContext, is_probe, probe_spec
from mathneuro.evaluation.task_store import TaskStore
from mathneuro.evaluation.task_table import TASKS

log = logging.getLogger(__name__)
_SIDE_NOTED: set[str] = set()  # tasks whose side was guessed, already reported in this process


def metric_key(kind: str, task: str, metric: str) -> str:
    """The flat metric name ``<kind>/<task>/<metric>``."""
    return f"{kind}/{task}/{metric}"


@contextlib.contextmanager
def _eval_mode(model: torch.nn.Module) -> Iterator[None]:
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


class Evaluator:
    """Evaluates ``model`` on ``cfg.tasks``; wraps the harness once (lazily) and reuses it across calls."""

    def __init__(self, model: torch.nn.Module, tokenizer, cfg: EvalConfig | Mapping[str, Any]) -> None:
        self.cfg = EvalConfig.coerce(cfg)
        self.cfg.validate()
        self.model = model
        self.tokenizer = tokenizer
        self.data_dir = self.cfg.resolved_data_dir()
        self._harness: Harness | None = None
        self._probe_contexts: dict[str, ProbeContext] = {}
        self.last_seconds: dict[str, float] = {}
        self.last_num_examples: dict[str, int] = {}
        self.last_raw: dict[str, dict[str, Any]] = {}
        self.last_samples: dict[str, list[dict[str, Any]]] = {}
        self.last_sample_kinds: dict[str, str] = {}
        self.last_task_info: dict[str, dict[str, Any]] = {}  # per task: lm-eval version, n-shot, directions
        self.calls = 0  # evaluate() calls so far (a caller tells an evaluation from a cached result)
        self.label = ""  # which model the log lines are about ("unedited model", "edited model"); set by the caller
        self._last_subtasks: dict[str, dict[str, dict[str, float]]] = {}

    @property
    def enabled(self) -> bool:
        """False when the config requests no task (``eval=none``): ``evaluate()`` then returns ``{}``."""
        return self.cfg.is_enabled()

    @property
    def harness(self) -> Harness:
        """The harness runner (its HFLM and TaskManager are built on first use)."""
        if self._harness is None:
            self._harness = Harness(self.model, self.tokenizer, self.cfg, self.data_dir)
        return self._harness

    def kind(self, task: str) -> str:
        """``"math"`` or ``"nonmath"``: the task table, unless ``eval.math_tasks`` / ``eval.nonmath_tasks`` say
        otherwise."""
        if (task not in TASKS and task not in self.cfg.math_tasks and task not in self.cfg.nonmath_tasks
                and not is_probe(task) and task not in _SIDE_NOTED):
            _SIDE_NOTED.add(task)
            log.warning("eval: task %r is in neither mathneuro's task table nor eval.math_tasks / "
                        "eval.nonmath_tasks: counted as non-math", task)
        return self.cfg.side(task)

    def evaluate(self, store: TaskStore | None = None) -> dict[str, float]:
        """Every task of the config on the model as it is now: ``{"<kind>/<task>/<metric>": value}``.

        The caller's global RNG states (python, numpy, torch) and the model's train/eval mode are
        unchanged afterwards. Per-task seconds and example counts land in ``last_seconds`` and
        ``last_num_examples``; lm-eval's raw result entries in ``last_raw``. With a ``store`` each
        task's result is kept there as it completes, and a task it already holds is read back, not
        evaluated again (an evaluation cut short resumes; see :mod:`~mathneuro.evaluation.task_store`).
        """
        metrics: dict[str, float] = {}
        self.last_seconds, self.last_num_examples, self.last_raw = {}, {}, {}
        self.last_samples, self.last_sample_kinds, self._last_subtasks = {}, {}, {}
        self.last_task_info = {}
        self.calls += 1
        if not self.enabled:
            return metrics
        with preserved_rng(), _eval_mode(self.model):
            for task in self.cfg.tasks:
                kept = store.load(task) if store is not None else None
                if kept is not None:
                    values = self._restore(task, kept)
                else:
                    samples_before, info_before = set(self.last_samples), set(self.last_task_info)
                    values = self.evaluate_task(task)
                    if store is not None:
                        store.save(task, self._kept(task, values, samples_before, info_before))
                kind = self.kind(task)
                metrics.update({metric_key(kind, task, m): v for m, v in values.items()})
                for sub, sub_values in self._last_subtasks.get(task, {}).items():
                    sub_kind = self.cfg.side(sub, task)
                    metrics.update({metric_key(sub_kind, sub, m): v for m, v in sub_values.items()})
                for sub in [s for s in self.last_samples if s not in self.last_sample_kinds]:
                    self.last_sample_kinds[sub] = self.cfg.side(sub, task)
        return metrics

    def evaluate_task(self, task: str) -> dict[str, float]:
        """One task's metrics (names without the ``<kind>/<task>/`` prefix)."""
        start = time.perf_counter()
        if not is_probe(task):
            run = self.harness.run(task)
            self.last_num_examples[task] = run.num_examples
            self.last_raw[task] = run.raw
            self._last_subtasks[task] = run.subtasks
            self.last_samples.update(run.samples)
            self.last_task_info.update(run.info)
            values = run.metrics
        else:
            with preserved_rng(), torch.no_grad():
                values = self._probe(task)
            records = self._probe_contexts[task].records
            if self.cfg.log_samples and records is not None:
                self.last_samples[task] = list(records)
            info = {"source": "probe", **(self._probe_contexts[task].info or {})}
            info.setdefault("higher_is_better", {m.split(",", 1)[0]: higher_is_better(m) for m in values
                                                 if not m.endswith("_stderr")})
            self.last_task_info[task] = info
        self.last_seconds[task] = time.perf_counter() - start
        log.info("eval%s %s: %s (%.1f s)", f" [{self.label}]" if self.label else "", task, values,
                 self.last_seconds[task])
        return values

    def _kept(self, task: str, values: dict[str, float], samples_before: set[str],
              info_before: set[str] = frozenset()) -> dict[str, Any]:
        """What a :class:`TaskStore` keeps of ``task``'s evaluation (everything :meth:`evaluate` reports)."""
        return {"values": values, "subtasks": self._last_subtasks.get(task, {}),
                "samples": {k: v for k, v in self.last_samples.items() if k not in samples_before},
                "info": {k: v for k, v in self.last_task_info.items() if k not in info_before},
                "num_examples": self.last_num_examples.get(task), "seconds": self.last_seconds.get(task)}

    def _restore(self, task: str, kept: dict[str, Any]) -> dict[str, float]:
        """Report a kept result of ``task`` as if it had just been evaluated; its metric values."""
        if kept.get("subtasks"):
            self._last_subtasks[task] = kept["subtasks"]
        self.last_samples.update(kept.get("samples") or {})
        self.last_task_info.update(kept.get("info") or {})
        if kept.get("num_examples") is not None:
            self.last_num_examples[task] = kept["num_examples"]
        if kept.get("seconds") is not None:
            self.last_seconds[task] = kept["seconds"]
        log.info("eval%s %s: %s (kept from an earlier attempt)", f" [{self.label}]" if self.label else "", task,
                 kept["values"])
        return kept["values"]

    # ------------------------------------------------------------------ probes
    def _probe(self, task: str) -> dict[str, float]:
        """Run the probe ``task`` names (registered or an import path) through the probe registry."""
        spec = probe_spec(task)
        ctx = self._probe_contexts.get(task)
        if ctx is None:
            ctx = ProbeContext(self.model, self.tokenizer, self.cfg, task, limit=self.cfg.limit_for(task),
                               data_dir=self.data_dir)
            self._probe_contexts[task] = ctx
        ctx.num_examples, ctx.records = None, None
        values = spec(ctx)
        if ctx.num_examples is not None:
            self.last_num_examples[task] = ctx.num_examples
        return {str(k): float(v) for k, v in values.items()}
