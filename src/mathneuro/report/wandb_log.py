"""Logging a sweep report to W&B: figures as images, points and comparison as tables, paired differences
as plottable history rows (one per compared point, K as the x-axis)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from mathneuro.report.identity import identity_fields, mark_identities
from mathneuro.report.inference import row_verdict
from mathneuro.report.paired import paired_columns
from mathneuro.report.tables import GROUP_FIELDS, columns_of, metric_names
from mathneuro.results.schema import POINT_FIELDS, SELECTION_COLUMNS

_LEADING = ("method", "filter", "top_k", "scalar", "seed", "intervention")  # a dashboard's first columns
WANDB_KEY_COLUMNS = (*_LEADING, *(f for f in POINT_FIELDS if f not in _LEADING))  # the point's identity


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return json.dumps(value, default=str)


def wandb_table_columns(rows: Sequence[Mapping], metrics: Sequence[str]) -> list[str]:
    """Key columns first (method, filter, top_k, scalar, seed, …), then selection numbers, metrics,
    baselines, absolute and relative changes of those metrics."""
    keys = [c for c in WANDB_KEY_COLUMNS if any(c in r for r in rows)]
    keys += [c for c in ("objective", *SELECTION_COLUMNS) if any(c in r for r in rows)]
    for m in metrics:
        keys += [c for c in (m, f"baseline/{m}", f"diff/{m}", f"rel_change/{m}") if any(c in r for r in rows)]
    return keys


def log_report_to_wandb(report: Mapping, run: Any) -> None:
    """Log a :func:`write_report` result to a W&B run: each figure as ``report/<name>`` image, the
    points as table ``report/points``, the over-seed comparison as ``report/comparison``, the
    paired differences as ``report/paired`` and as one history row per compared point
    (:func:`paired_history`).

    No-op if wandb is not importable or ``run`` is None; any W&B error becomes a warning."""
    if run is None:
        return
    try:
        import wandb
    except Exception:  # noqa: BLE001 - wandb is optional at this point
        return
    try:
        payload = report_payload(report, wandb)
        if payload:
            run.log(payload)
        if report.get("paired"):
            log_paired_history(report["paired"], run)
        summary = getattr(run, "summary", None)
        if summary is not None:
            summary["report/complete_points"] = len(report.get("rows") or [])
            summary["report/missing_points"] = len(report.get("missing") or [])
            summary["report/comparisons_not_made"] = len(report.get("paired_notes") or [])
    except Exception as err:  # noqa: BLE001 - reporting must never break the caller
        warnings.warn(f"W&B logging of the report failed: {err}", stacklevel=2)


def report_payload(report: Mapping, wandb: Any) -> dict[str, Any]:
    """What :func:`log_report_to_wandb` logs in one call (built without a run): ``report/<figure>`` images,
    the ``report/points``, ``report/comparison`` and ``report/paired`` tables. ``report/paired``'s
    ``difference`` is :func:`~mathneuro.report.inference.row_verdict`, the verdict every output gives."""
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
        pcols = paired_columns(report["paired"])
        payload["report/paired"] = wandb.Table(columns=pcols, data=[
            [_cell(row_verdict(r) if c == "difference" else r.get(c)) for c in pcols] for r in report["paired"]])
    return payload


#: The point fields of a paired row that identify the compared point (one history row each).
PAIRED_POINT = ("method", "model", "filter", "intervention", "num_samples", "scalar", "top_k")


def paired_history(paired: Sequence[Mapping]) -> list[dict[str, Any]]:
    """One history row per compared point (its seeds pooled): ``method``, ``K`` (= ``top_k``), ``scalar``,
    ``model``, ``filter``, ``intervention``, ``num_samples``, ``seeds`` and, per reference, task and
    metric, ``paired/<series>/vs_<reference>/<task>/<metric>`` (the paired difference) with ``…/ci_low``
    and ``…/ci_high`` (its draws + examples interval, the one that decides the verdict). ``<series>`` is the method,
    then each other field that varies in the sweep (``s=1.1``, ``filter=race``...), so one key is one line over K: a W&B
    line plot of a key
    (its x-axis K, set by ``define_metric``) is the K plot, several keys in one plot compare the lines."""
    fields = (*PAIRED_POINT, *identity_fields(paired))  # config keys that keep points apart, too
    varying = [f for f in (*PAIRED_POINT[1:-1], *fields[len(PAIRED_POINT):])
               if len({json.dumps(r.get(f), default=str) for r in paired}) > 1]
    short = {"scalar": "s", "num_samples": "N"}
    rows: dict[tuple, dict[str, Any]] = {}
    for r in paired:
        key = tuple(json.dumps(r.get(f), default=str) for f in fields)
        row = rows.setdefault(key, {**{f: r.get(f) for f in fields}, "K": r.get("top_k"), "seeds": r.get("seeds")})
        series = "/".join([str(r.get("method")), *(f"{short.get(f, f)}={r.get(f)}" for f in varying)])
        name = f"paired/{series}/vs_{r.get('reference')}/{r.get('task')}/{r.get('metric')}"
        for suffix, col in (("", "diff"), ("/ci_low", "ci95_low"), ("/ci_high", "ci95_high")):  # the deciding interval
            if isinstance(r.get(col), (int, float)):
                row[name + suffix] = r[col]

    def order(row: Mapping) -> tuple:
        return (str(row.get("method")), str(row.get("model")), str(row.get("filter")), str(row.get("intervention")),
                str(row.get("num_samples")), float(row.get("scalar") or 0), float(row.get("top_k") or 0))

    return sorted(rows.values(), key=order)


def log_paired_history(paired: Sequence[Mapping], run: Any) -> int:
    """Log :func:`paired_history` to ``run`` (K as the x-axis of every ``paired/*`` key); the rows logged."""
    rows = paired_history(paired)
    if not rows:
        return 0
    run.define_metric("K")
    run.define_metric("paired/*", step_metric="K")
    for row in rows:
        run.log({k: v for k, v in row.items() if v is not None})
    return len(rows)


def update_point_summaries(results: Sequence[Mapping], paired: Sequence[Mapping]) -> int:
    """Online runs only: add each point's paired differences (``paired/vs_<reference>/<task>/<metric>``,
    ``…/ci_low``, ``…/ci_high``) to its own W&B run's summary, through the W&B API. Returns how many
    runs were updated; offline points (``results["wandb"]["mode"] != "online"``) are left as they are."""
    results = [dict(r) for r in results]
    mark_identities(results, GROUP_FIELDS)  # the config.<key> fields the paired rows carry
    online = [r for r in results if (r.get("wandb") or {}).get("mode") == "online" and (r.get("wandb") or {}).get("id")]
    if not online or not paired:
        return 0
    import wandb

    api = wandb.Api()
    updated = 0
    fields = (*PAIRED_POINT, *identity_fields(paired))
    for result in online:
        point, info = result.get("point") or {}, result["wandb"]
        values = {}
        for r in paired:
            if all(json.dumps(r.get(f), default=str) == json.dumps(point.get(f), default=str) for f in fields):
                name = f"paired/vs_{r.get('reference')}/{r.get('task')}/{r.get('metric')}"
                values.update({name: r.get("diff"), f"{name}/ci_low": r.get("ci95_low"),
                               f"{name}/ci_high": r.get("ci95_high"), f"{name}/verdict": row_verdict(r)})
        if values:
            entity = info.get("entity") or api.default_entity
            api.run(f"{entity}/{info.get('project')}/{info['id']}").summary.update(values)
            updated += 1
    return updated
