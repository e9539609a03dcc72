"""What a sweep point puts in its W&B run, besides its config: summary, metric definitions, tables, artifacts.

- **Summary**: every number of the point's flat row (:meth:`~mathneuro.results.schema.PointResult.row`):
  the point fields (``top_k``, ``scalar``, ``seed``...), ``<side>/<task>/<metric>`` after the edit,
  ``baseline/<m>`` before it, ``diff/<m>`` = after - before (absolute, in the metric's unit) and
  ``rel_change/<m>`` = (after - before) / before, ``selection/*``, ``per_layer/*``, ``time/<stage>``.
- **Metric definitions**: ``define_metric`` for each of those metric keys, its summary the best value
  (``max`` where higher is better, ``min`` where lower is: the task's ``higher_is_better``, else the name).
- **Tables** (``eval.log_samples``): ``samples/<task>`` (a group's: one table, its subtask a column), one row per
  example: doc id, the prompt's last 300 characters (its question), target, the edited model's answer and the
  unedited model's (``baseline_answer``) side by side, their scores (``<metric>``, ``baseline/<metric>``), the
  prompt's hash and ``same_prompt``.
- **Artifacts**, with metadata (method, K, scalar, model, task, filter, seed, statistics keys, group):
  ``selection-<run id>`` (type ``selection``: the saved ``selection*.safetensors``), ``results-<run id>``
  (type ``results``: ``results.json`` and the per-example records) and ``model-<run id>`` (type ``model``:
  a reference to the exported model folder, ``export_model=true``).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from mathneuro.evaluation.samples import read_records
from mathneuro.results.provenance import metric_direction
from mathneuro.results.recording import WandbRun
from mathneuro.results.schema import POINT_FIELDS, PointResult
from mathneuro.results.wandb_layout import run_name, run_tags, sweep_identity

log = logging.getLogger("mathneuro")
_NOT_METRICS = ("doc_id", "subtask", "doc_hash", "prompt_hash", "prompt", "target", "answer", "response")


def point_layout(cfg: Any, point: Mapping[str, Any], output_dir: Path, *, group: str | None = None,
                 tags: Sequence[str] | None = None, layout: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"group", "name", "tags", "job_type"}`` of a point's run (:mod:`~mathneuro.results.wandb_layout`).

    ``layout`` (from the CLI): ``experiment`` (the chosen experiment), ``extras`` (this job's values of the
    other swept keys), ``sweep_dir``. ``group``: the sweep's identity, when the caller knows it;
    ``tags``: more tags. ``logger.group``, ``logger.run_name`` and ``logger.tags`` win."""
    layout = dict(layout or {})
    logger = cfg.logger
    if getattr(logger, "group", None):
        group = logger.group
    elif group is None and logger.name == "wandb":  # no identity file in a sweep that logs nowhere
        group = sweep_identity(layout.get("sweep_dir") or output_dir, layout.get("experiment"),
                               multirun=bool(layout.get("sweep_dir")))["group"]
    name = run_name(point, layout.get("extras"), getattr(logger, "run_name", None))
    all_tags = run_tags(point, eval_name=getattr(cfg.eval, "name", None), experiment=layout.get("experiment"),
                        extra=[*(tags or []), *logger.tags])
    return {"group": group, "name": name, "tags": all_tags, "job_type": str(point.get("method"))}


def summary_values(record: PointResult) -> dict[str, float]:
    """The numbers of the point's summary (see the module docstring)."""
    out = {k: v for k, v in record.row().items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out.update({f"time/{k}": v for k, v in record.timings.items()})
    return out


def metric_directions(record: PointResult) -> dict[str, str]:
    """``{key: "up" | "down"}`` for every metric key of the summary (after, baseline, diff, rel_change)."""
    tasks = (record.provenance or {}).get("tasks") or {}
    out = {}
    row = record.row()
    for name in record.metrics:
        direction = metric_direction(name, tasks)
        for key in (name, f"baseline/{name}", f"diff/{name}", f"rel_change/{name}"):
            if key in row:
                out[key] = direction
    return out


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, default=str)


def samples_table(mine: list[dict], theirs: list[dict] | None) -> tuple[list[str], list[list[Any]]]:
    """Columns and rows of one task's ``samples/<task>`` table (``theirs``: the unedited model's records):
    the example (doc id, subtask, the end of its prompt, target), the edited and the unedited model's answers
    side by side, their scores, then the prompt's hash and whether both models saw the same prompt."""
    metrics = sorted({k for r in mine for k in r
                      if k not in _NOT_METRICS and not k.startswith(("answer,", "response"))})
    keyed = {(r.get("subtask"), r.get("doc_id")): r for r in theirs or []}
    sub = any("subtask" in r for r in mine)
    both = theirs is not None
    cols = ["doc_id", *(["subtask"] if sub else []), "prompt", "target", "answer",
            *(["baseline_answer"] if both else []),
            *metrics, *((f"baseline/{m}" for m in metrics) if both else ()), "prompt_hash",
            *(["same_prompt"] if both else [])]
    rows = []
    for r in mine:
        b = keyed.get((r.get("subtask"), r.get("doc_id")), {})
        row = [r.get("doc_id"), *([r.get("subtask")] if sub else []), r.get("prompt", b.get("prompt")), r.get("target"),
               r.get("answer"), *([b.get("answer")] if both else []), *(r.get(m) for m in metrics)]
        if both:
            row += [b.get(m) for m in metrics]
        row.append(r.get("prompt_hash"))
        if both:
            row.append(None if not b.get("prompt_hash") else b.get("prompt_hash") == r.get("prompt_hash"))
        rows.append([_cell(v) for v in row])
    return cols, rows


def _baseline_dir(output_dir: Path, samples: Mapping[str, Any]) -> Path | None:
    base = samples.get("baseline_dir")
    return None if not base else output_dir / str(base)


def artifact_metadata(record: PointResult, layout: Mapping[str, Any]) -> dict[str, Any]:
    """What every artifact of a point says about it."""
    git = (record.provenance or {}).get("git") or {}
    return {**{k: record.point.get(k) for k in POINT_FIELDS}, "statistics_keys": list(record.statistics_keys),
            "num_selected": record.selection.get("num_selected"), "group": layout.get("group"),
            "run_name": layout.get("name"), "mathneuro_version": (record.provenance or {}).get("version"),
            "git_commit": git.get("commit"), "git_dirty": git.get("dirty")}


def log_point(run: WandbRun, record: PointResult, output_dir: Path, layout: Mapping[str, Any]) -> None:
    """Summary, metric definitions, per-example tables and artifacts of a finished point (never raises:
    the point's results are written already; what W&B could not take is one warning)."""
    if run.run is None:
        return
    try:
        _log_point(run, record, output_dir, layout)
    except Exception as exc:  # noqa: BLE001 - e.g. an unreadable records file: W&B must never fail a point
        warnings.warn(f"W&B logging of the point failed: {exc}", stacklevel=2)


def _log_point(run: WandbRun, record: PointResult, output_dir: Path, layout: Mapping[str, Any]) -> None:
    directions = metric_directions(record)
    values = summary_values(record)
    run.config({"provenance": record.provenance, "metric_directions": directions})
    run.define_metrics(directions)
    run.log({k: v for k, v in values.items() if k in directions})
    run.summary(values)
    run.table("selection/per_layer", ["layer", "count"], [[k, v] for k, v in record.per_layer.items()])
    samples = record.samples or {}
    folder, base = output_dir / str(samples.get("dir") or "samples"), _baseline_dir(output_dir, samples)
    files: dict[str, Path] = {"results.json": output_dir / "results.json"}
    mine: dict[str, list[dict]] = {}
    for task in samples.get("tasks") or {}:
        stem = f"{task.replace('/', '_')}.jsonl"
        if (folder / stem).is_file():
            files[f"samples/{stem}"] = folder / stem
            mine[task] = read_records(folder / stem)
            if base is not None and (base / stem).is_file():
                files[f"baseline_samples/{stem}"] = base / stem
    pooled = {str(r["subtask"]) for records in mine.values() for r in records if "subtask" in r}
    for task, records in mine.items():  # a group's subtasks are rows of the group's table, not tables of their own
        if task not in pooled:
            stem = f"{task.replace('/', '_')}.jsonl"
            theirs = read_records(base / stem) if f"baseline_samples/{stem}" in files else None
            run.table(f"samples/{task}", *samples_table(records, theirs))
    meta = artifact_metadata(record, layout)
    run_id = run.run.id
    selections = {p.name: p for p in sorted(output_dir.glob("selection*.safetensors"))}
    if selections:
        run.artifact(f"selection-{run_id}", "selection", meta, selections)
    run.artifact(f"results-{run_id}", "results", meta, files)
    if (output_dir / "model").is_dir():
        run.artifact(f"model-{run_id}", "model", meta, {}, reference=output_dir / "model")
