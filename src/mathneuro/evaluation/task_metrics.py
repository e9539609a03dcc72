"""The metric names a harness task reports, read from its lm-eval config: no model, no data, no task built.

Results and per-example records name a metric ``<metric>`` under lm-eval's ``none`` filter and
``<metric>,<filter>`` under any other (``samples.metric_name``): ``acc``, ``acc_norm``,
``exact_match,strict-match``. Code that reads a metric by name (a claims test, a report's column) checks
the name here before a run, instead of finding it absent from the records after hours of evaluation.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mathneuro.evaluation.probe_registry import is_probe
from mathneuro.evaluation.samples import metric_name
from mathneuro.evaluation.task_index import (
    lm_eval_task_names,
    local_task_names,
    needs_lm_eval_tasks,
    suggestion,
)
from mathneuro.evaluation.task_table import TASKS, lm_eval_name, local_tasks_dir

if TYPE_CHECKING:
    from mathneuro.evaluation.config import EvalConfig


def reported_metrics(task: str, data_dir: Path | None = None, include_paths: Sequence[Path] = ()) -> frozenset[str]:
    """The flat metric names ``task`` reports (every subtask's, for a group or tag), as results.json keys them.

    ``task`` is a name of our table (its local twin with ``data_dir``, else the stock task) or any lm-eval
    task, group or tag name. Raises ``KeyError`` for an unknown name and ``ValueError`` for a task whose
    metrics only its Python class knows.
    """
    from mathneuro.evaluation.harness import shared_task_manager  # deferred: imports lm-eval

    name = lm_eval_name(task, data_dir) if task in TASKS else task
    folders = [local_tasks_dir(), *include_paths]
    stock = needs_lm_eval_tasks([name], folders[1:])
    if stock and name not in lm_eval_task_names():  # unknown everywhere: say so without indexing lm-eval's tasks
        known = set(local_task_names(folders[1:])) | set(lm_eval_task_names())
        raise KeyError(f"{task!r}: no lm-eval task, group or tag is named {name!r}{suggestion(name, known)}")
    index = shared_task_manager(folders, stock, None).task_index
    leaves = _leaf_configs(index, name, seen=set())
    if not leaves:
        raise KeyError(f"{task!r}: lm-eval's index holds no task under {name!r}")
    names = [_metric_names(name, cfg) for cfg in leaves]
    return frozenset(set.intersection(*names))  # a pooled group reads a metric only if every subtask has it


def _leaf_configs(index: dict[str, Any], name: str, seen: set[str]) -> list[dict[str, Any]]:
    """The configs of the tasks ``name`` runs: itself, a group's members (recursively) or a tag's tasks."""
    if name in seen:  # a group that names itself through a tag: each task once
        return []
    seen.add(name)
    entry = index.get(name)
    if entry is None:
        raise KeyError(f"lm-eval's index holds no task, group or tag named {name!r}")
    kind = entry.kind.name
    if kind in ("TASK", "PY_TASK"):
        return [entry.cfg]
    if kind == "GROUP":
        members = entry.cfg.get("task") or []
        out: list[dict[str, Any]] = []
        for member in members if isinstance(members, list) else [members]:
            if isinstance(member, dict):  # an inline task: its own config, or a named task with overrides
                inner = member.get("task")
                out += [{**index[inner].cfg, **member}] if isinstance(inner, str) and inner in index \
                    and index[inner].kind.name in ("TASK", "PY_TASK") else [member]
            else:
                out += _leaf_configs(index, member, seen)
        return out
    return [c for n, e in index.items() if name in e.tags for c in _leaf_configs(index, n, seen)]  # a tag


def _metric_names(task: str, cfg: dict[str, Any]) -> set[str]:
    """``{metric, ...} × {filter, ...}`` of one task's config; lm-eval's defaults where it names none."""
    from lm_eval.api.registry import DEFAULT_METRIC_REGISTRY

    if "class" in cfg:
        raise ValueError(f"{task!r} ({cfg.get('task')}): a Python-class task; its metrics are known only once built")
    metrics = cfg.get("metric_list")
    if metrics is None:
        output_type = cfg.get("output_type", "generate_until")
        bases = list(DEFAULT_METRIC_REGISTRY.get(output_type, ()))
    else:
        # a `!function module.fn` metric reads back as its path; lm-eval reports it under the function's name
        bases = [str(m["metric"]).rsplit("/", 1)[-1].rsplit(".", 1)[-1] if "/" in str(m["metric"])
                 or "." in str(m["metric"]) else m["metric"] for m in metrics if isinstance(m, dict) and "metric" in m]
    filters = [f.get("name", "none") for f in cfg.get("filter_list") or []] or ["none"]
    return {metric_name(str(m), str(f)) for m in bases for f in filters}


def check_metric_key(key: str, value: str, cfg: EvalConfig) -> None:
    """Raise ``ValueError`` (one line, naming ``key``) unless ``value`` is a metric the run under ``cfg`` will
    report: ``<side>/<task>/<metric>`` with ``task`` one of ``eval.tasks`` (or a subtask of one), ``side`` the
    one its metrics count for, and ``metric`` one its lm-eval config makes (a probe's are not declared)."""
    if not cfg.is_enabled():
        raise ValueError(f"{key}: {value!r} names a metric, but eval=none evaluates nothing")
    parts = value.split("/", 2)
    if len(parts) != 3 or not all(parts):
        raise ValueError(f"{key}: {value!r} is not <side>/<task>/<metric>, "
                         "e.g. math/gsm8k_cot/exact_match,strict-match")
    side, task, metric = parts
    parent = task if task in cfg.tasks else next((t for t in cfg.tasks if task.startswith(f"{t}_")), None)
    if parent is None:
        raise ValueError(f"{key}: task {task!r} is not evaluated; eval.tasks: {', '.join(cfg.tasks)}")
    expected = cfg.side(task, parent)
    if side != expected:
        raise ValueError(f"{key}: {task!r} counts as {expected} in this run: {expected}/{task}/{metric}")
    if parent not in TASKS and is_probe(parent) or parent in TASKS and TASKS[parent].probe:
        return  # a probe's metric names are known only once it has run
    try:
        known = reported_metrics(parent, cfg.resolved_data_dir(), cfg.include_paths())
    except ValueError:  # a Python-class task: nothing to check against before it is built
        return
    if metric not in known:
        raise ValueError(f"{key}: {task!r} reports no metric {metric!r}; it reports: {', '.join(sorted(known))}")

