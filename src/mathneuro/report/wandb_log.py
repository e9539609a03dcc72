"""Logging a sweep report to W&B: figures as images, points and comparison as tables."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from mathneuro.pipeline.results import SELECTION_COLUMNS
from mathneuro.report.paired import COLUMNS, EXTRA_COLUMNS
from mathneuro.report.tables import columns_of, metric_names

WANDB_KEY_COLUMNS = ("method", "filter", "top_k", "scalar", "seed", "intervention", "model", "task", "num_samples")


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, default=str)


def wandb_table_columns(rows: Sequence[Mapping], metrics: Sequence[str]) -> list[str]:
    """Key columns first (method, filter, top_k, scalar, seed, …), then selection numbers, metrics,
    baselines and deltas of those metrics."""
    keys = [c for c in WANDB_KEY_COLUMNS if any(c in r for r in rows)]
    keys += [c for c in ("objective", *SELECTION_COLUMNS) if any(c in r for r in rows)]
    for m in metrics:
        keys += [c for c in (m, f"baseline/{m}", f"delta/{m}") if any(c in r for r in rows)]
    return keys


def log_report_to_wandb(report: Mapping, run: Any) -> None:
    """Log a :func:`write_report` result to a W&B run: each figure as ``report/<name>`` image, the
    points as table ``report/points``, the over-seed comparison as ``report/comparison`` and the
    paired differences as ``report/paired``.

    No-op if wandb is not importable or ``run`` is None; any W&B error becomes a warning."""
    if run is None:
        return
    try:
        import wandb
    except Exception:  # noqa: BLE001 - wandb is optional at this point
        return
    try:
        payload: dict[str, Any] = {}
        for name, path in (report.get("figures") or {}).items():
            payload[f"report/{name}"] = wandb.Image(str(path))
        rows = list(report.get("rows") or [])
        metrics = list(report.get("metrics") or metric_names(rows))
        if rows:
            cols = wandb_table_columns(rows, metrics)
            payload["report/points"] = wandb.Table(columns=cols, data=[[_cell(r.get(c)) for c in cols] for r in rows])
        comp = list(report.get("comparison") or [])
        if comp:
            ccols = columns_of(comp)
            payload["report/comparison"] = wandb.Table(columns=ccols, data=[[_cell(r.get(c)) for c in ccols] for r in comp])
        if report.get("paired"):
            pcols = [*COLUMNS, *EXTRA_COLUMNS]
            payload["report/paired"] = wandb.Table(columns=pcols, data=[[_cell(r.get(c)) for c in pcols]
                                                                        for r in report["paired"]])
        if payload:
            run.log(payload)
        summary = getattr(run, "summary", None)
        if summary is not None:
            summary["report/complete_points"] = len(rows)
            summary["report/missing_points"] = len(report.get("missing") or [])
    except Exception as err:  # noqa: BLE001 - reporting must never break the caller
        warnings.warn(f"W&B logging of the report failed: {err}", stacklevel=2)
