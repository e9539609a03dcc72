"""The results schema of one sweep point: :class:`PointResult`, its JSON form and its flat row.

The runner builds a :class:`PointResult` and writes :meth:`PointResult.to_json` as
``results.json``; reports, analyses and W&B read results only through :func:`load` /
:func:`coerce` and :meth:`PointResult.row` (see ``docs/contracts.md``). Fields are added over
time, never renamed; fields this version does not know are kept in ``extra`` and written back.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mathneuro.util.io import write_json_atomic

RESULTS_FILE = "results.json"

#: A point's identity: the config values that tell one sweep point from another (``results.json``'s
#: ``point``, the flat row's first columns, W&B tags and artifact metadata). Written down here only.
POINT_FIELDS = ("model", "task", "filter", "method", "top_k", "intervention", "scalar", "seed", "num_samples")
#: The point fields two points must share for their per-example records to be paired: the identity less
#: ``method`` and ``seed`` (what is compared, and what is pooled), plus ``intervention_args``. The order
#: is that of the paired report's group keys.
PAIRING_FIELDS = ("model", "task", "filter", "intervention", "scalar", "intervention_args", "top_k", "num_samples")
SELECTION_FIELDS = ("num_selected", "num_scored", "num_parameters", "fraction_of_model", "fraction_of_scored",
                    # these two count a neuron as the weights it feeds
                    "num_weights_edited", "fraction_of_model_edited",
                    # the upstream denominator, where model.tied_embeddings_upstream says the upstream ties lm_head
                    "num_parameters_upstream", "fraction_of_model_upstream", "fraction_of_model_edited_upstream")
SELECTION_COLUMNS = tuple(f"selection/{f}" for f in SELECTION_FIELDS)  # the runner's W&B summary names
METRIC_SIDES = ("math/", "nonmath/")


def is_number(value: Any) -> bool:
    """A finite int or float, not a bool: a cell that can be averaged or plotted (the report uses it too)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _number(value: Any) -> Any:
    """A number from a number or a numeric string (CSV cells); anything else unchanged."""
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and "." not in value and "e" not in value.lower() else number
    return value


@dataclass
class PointResult:
    """One sweep point's ``results.json``.

    ``point``: the few config values that identify it (:data:`POINT_FIELDS`); ``selection``: counts,
    fractions, ``per_layer`` and ``per_module``; ``metrics`` / ``baseline_metrics``:
    ``<math|nonmath>/<task>/<metric>`` after the edit / of the unedited model; ``timings``: seconds
    per stage; ``peak_memory``: MB per stage; ``sample_ids_hash``: ``{"task": .., "filter": ..}``;
    ``objective``: what a sweeper optimises (None when undefined); ``samples``: where per-example
    records are (``eval.log_samples``); ``hardware``: the device, its name, the dtype and the threads
    the point ran with (timings and float results depend on them); ``cluster``: the scheduler's job
    (SLURM job and array ids, requeue count); ``attempts``: how many attempts the point took;
    ``resumed``: what later attempts read back from earlier ones (statistics batches, evaluated tasks);
    ``drafting``: what drafted greedy decoding did while the edit was evaluated (``requests``,
    ``requests_drafted``, ``tokens_generated``, ``tokens_drafted``, ``tokens_accepted``, ``passes``;
    :class:`~mathneuro.evaluation.decoding.drafts.DraftCounts`); ``provenance``: the code that made the numbers
    (version, git commit and dirty flag, library versions, each task's lm-eval version, n-shot and
    metric directions; :mod:`~mathneuro.results.provenance`).
    """

    status: str = "complete"
    point: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    selection: dict[str, Any] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    baseline_metrics: dict[str, float] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    peak_memory: dict[str, dict[str, float]] = field(default_factory=dict)
    statistics_keys: list[str] = field(default_factory=list)
    statistics: list[dict[str, Any]] | None = None  # {dataset, kind, key, source} per entry used; absent in old results
    sample_ids_hash: dict[str, str] = field(default_factory=dict)
    versions: dict[str, str] = field(default_factory=dict)
    objective: float | None = None
    samples: dict[str, Any] | None = None  # eval.log_samples: {"dir", "baseline_dir", "tasks"}; absent otherwise
    hardware: dict[str, Any] | None = None  # {"device", "device_name", "dtype", "threads", ...}; absent in old results
    # {"scheduler": "slurm", "job_id", "array_job_id", "array_task_id", "restart_count", ...}; absent outside a
    # scheduler
    cluster: dict[str, Any] | None = None
    attempts: int | None = None  # attempts this point took (1: done at the first); absent in old results
    # {"statistics": [..], "baseline_tasks": [..], "edited_tasks": [..]} read back from earlier attempts; absent if none
    resumed: dict[str, Any] | None = None
    drafting: dict[str, int] | None = None  # greedy decoding of the edit: requests, tokens drafted/accepted, passes
    provenance: dict[str, Any] | None = None  # {"version", "git", "packages", "tasks"}; absent in old results
    extra: dict[str, Any] = field(default_factory=dict)  # fields this version does not know, kept as they are

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    @property
    def per_layer(self) -> dict[str, Any]:
        """Selected count per decoder block (``"other"`` for parameters outside numbered blocks)."""
        return dict(self.selection.get("per_layer") or {})

    def to_json(self) -> dict[str, Any]:
        """The plain dict written as ``results.json`` (non-finite numbers become null when written)."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "extra"}
        if data["samples"] is None:
            del data["samples"]  # written only by runs that log per-example records
        if data["statistics"] is None:
            del data["statistics"]  # results written before statistics sources were recorded
        # absent: older results, or nothing to say
        for name in ("hardware", "cluster", "attempts", "resumed", "drafting", "provenance"):
            if data[name] is None:
                del data[name]
        return {**data, **self.extra}

    def write(self, path: str | os.PathLike) -> Path:
        """Write :meth:`to_json` to ``path`` (a file, or a run dir for its ``results.json``) atomically."""
        path = Path(path)
        if path.is_dir():
            path = path / RESULTS_FILE
        write_json_atomic(path, self.to_json())
        return path

    def row(self, job: str | None = None) -> dict[str, Any]:
        """One flat row: point fields, ``job``, ``objective``, ``selection/<number>``, every metric, the
        baseline metrics as ``baseline/<m>``, absolute differences ``diff/<m>`` = after - before, relative
        changes ``rel_change/<m>`` = (after - before) / before (only where before is a non-zero number;
        neither for standard errors), and ``per_layer/<block>`` / ``per_module/<type>``."""
        row: dict[str, Any] = dict(self.point)
        if job is not None:
            row["job"] = job
        for key in SELECTION_FIELDS:
            if key in self.selection:
                row[f"selection/{key}"] = self.selection[key]
        if is_number(self.objective):
            row["objective"] = self.objective
        for name, value in self.metrics.items():
            row[name] = value
        for name, value in self.baseline_metrics.items():
            row[f"baseline/{name}"] = value
        for name, after in self.metrics.items():
            before = self.baseline_metrics.get(name)
            if "_stderr" in name.rsplit("/", 1)[-1]:
                continue  # a relative change of a standard error means nothing
            if is_number(after) and is_number(before):
                row[f"diff/{name}"] = after - before
                if before != 0:
                    row[f"rel_change/{name}"] = (after - before) / before
        for key, count in self.per_layer.items():
            row[f"per_layer/{key}"] = count
        for key, count in (self.selection.get("per_module") or {}).items():
            row[f"per_module/{key}"] = count
        return row

    # ------------------------------------------------------------------------------ reading
    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PointResult:
        """A record from a ``results.json`` dict of any version (missing fields take their defaults;
        unknown ones go to ``extra``; a string ``sample_ids_hash`` becomes ``{"task": <it>}``)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in data.items() if k in names and v is not None}
        extra = {k: v for k, v in data.items() if k not in names and not k.startswith("_")}
        if isinstance(known.get("sample_ids_hash"), str):
            known["sample_ids_hash"] = {"task": known["sample_ids_hash"]}
        if "objective" in data:
            known["objective"] = data["objective"]
        return cls(**known, extra=extra)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> PointResult:
        """A record from a flat row (:meth:`row`, or a line of ``points.csv`` with numbers as text)."""
        point, selection, metrics, baseline = {}, {}, {}, {}
        per_layer, per_module = {}, {}
        for key, raw in row.items():
            value = _number(raw)
            if value in ("", None):
                continue
            if key.startswith(METRIC_SIDES):
                metrics[key] = value
            elif key.startswith("baseline/"):
                baseline[key[len("baseline/"):]] = value
            elif key.startswith("selection/"):
                selection[key[len("selection/"):]] = value
            elif key.startswith("per_layer/"):
                per_layer[key[len("per_layer/"):]] = value
            elif key.startswith("per_module/"):
                per_module[key[len("per_module/"):]] = value
            elif "/" not in key and key not in ("job", "objective"):
                point[key] = value
        if per_layer:
            selection["per_layer"] = per_layer
        if per_module:
            selection["per_module"] = per_module
        selection.setdefault("method", point.get("method"))
        selection.setdefault("top_k", point.get("top_k"))
        return cls(point=point, selection=selection, metrics=metrics, baseline_metrics=baseline,
                   objective=_number(row.get("objective")) if row.get("objective") not in (None, "") else None)

    @classmethod
    def from_selection(cls, summary: Mapping[str, Any]) -> PointResult:
        """A record holding only a selection summary (``Selection.summary()``)."""
        point = {"method": summary.get("method") or "selection", "top_k": summary.get("top_k")}
        return cls(point={k: v for k, v in point.items() if v is not None}, selection=dict(summary))


def coerce(obj: Any) -> PointResult:
    """A :class:`PointResult` from any shape results come in: a record, a ``results.json`` dict, a
    selection summary (has ``per_layer``, no ``selection``) or a flat row (``per_layer/<k>`` keys)."""
    if isinstance(obj, PointResult):
        return obj
    if not isinstance(obj, Mapping):
        raise TypeError(f"results: expected a results dict, a selection summary or a row, got {type(obj).__name__}")
    if isinstance(obj.get("selection"), Mapping) or "status" in obj or isinstance(obj.get("metrics"), Mapping):
        return PointResult.from_json(obj)
    if isinstance(obj.get("per_layer"), Mapping):
        return PointResult.from_selection(obj)
    return PointResult.from_row(obj)


def read_json(path: str | os.PathLike) -> dict[str, Any]:
    """The raw dict of ``path`` (a ``results.json`` or the run dir holding it).

    Raises OSError (unreadable), ValueError (not JSON, or not an object at the top level)."""
    path = Path(path)
    if path.is_dir():
        path = path / RESULTS_FILE
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise ValueError("top level is not an object")
    return data


def read_complete_results(run_dir: str | os.PathLike) -> dict | None:
    """The results of ``run_dir`` if a complete ``results.json`` is there, else None."""
    try:
        data = read_json(Path(run_dir) / RESULTS_FILE)
    except (OSError, ValueError):
        return None
    return data if data.get("status") == "complete" else None


def load(path: str | os.PathLike) -> PointResult:
    """The record in ``path`` (a ``results.json`` or the run dir holding it); OSError / ValueError if unreadable."""
    return PointResult.from_json(read_json(path))


def tidy_row(result: Mapping | PointResult) -> dict:
    """One flat row of a result (see :meth:`PointResult.row`); ``_job`` of a loaded result becomes ``job``."""
    job = result.get("_job") if isinstance(result, Mapping) else None
    return coerce(result).row(job=job)
